//! A broker outage the bench makes itself: `rabbitmqctl stop_app`, later
//! `rabbitmqctl start_app`, on the single local RabbitMQ node the target uses
//! (`RELAYOPS_AMQP_URL` must name this machine). [`StoppedBroker`] starts the
//! node's app again on every way out: its `start`, an error or a panic (its
//! drop), Ctrl-C or SIGTERM (a watcher). Only SIGKILL escapes it.
//!
//! The broker may be shared (a test suite on the same machine): before the
//! outage the bench waits until no process whose executable path (argv[0])
//! contains one of `--recovery-yield-to` runs, and stops nothing if one has
//! started by the moment it would.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

/// The RabbitMQ CLI the outage is made with.
const RABBITMQCTL: &str = "rabbitmqctl";
/// The longest one `rabbitmqctl` command may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(120);
/// How often, and how long at most, the bench waits for the broker's other users.
const YIELD_POLL: Duration = Duration::from_secs(10);
const YIELD_LIMIT: Duration = Duration::from_secs(30 * 60);

/// Whether the node's app is stopped by this process (the signal watcher's question).
static BROKER_STOPPED: AtomicBool = AtomicBool::new(false);
static SIGNAL_WATCHER: Once = Once::new();

/// Fails unless `rabbitmqctl` is on `PATH` and `amqp_url` names this machine.
pub fn check_local(amqp_url: &str) -> anyhow::Result<()> {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(RABBITMQCTL).is_file()));
    anyhow::ensure!(
        on_path,
        "the recovery scenario stops the local RabbitMQ node with `{RABBITMQCTL}`, which is not on PATH \
         (run the bench on the broker's machine, as a user who may run it)"
    );
    let host = amqp_host(amqp_url);
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    anyhow::ensure!(
        loopback,
        "the recovery scenario stops the local RabbitMQ node: RELAYOPS_AMQP_URL must name this machine, not {host:?}"
    );
    Ok(())
}

/// The host of an `amqp://user:password@host:port/vhost` URL.
fn amqp_host(url: &str) -> &str {
    let authority = url.split_once("://").map_or(url, |(_, rest)| rest).split('/').next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    match host_port.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    }
}

/// A running process (not this one) whose argv[0] contains one of
/// `patterns`: its pid and argv[0]. Linux only (elsewhere, none).
pub fn other_broker_user(patterns: &[String]) -> Option<String> {
    let patterns: Vec<&String> = patterns.iter().filter(|p| !p.is_empty()).collect();
    if patterns.is_empty() || !cfg!(target_os = "linux") {
        return None;
    }
    let own = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if pid == own || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let argv0 = String::from_utf8_lossy(cmdline.split(|b| *b == 0).next().unwrap_or_default()).into_owned();
        if patterns.iter().any(|p| argv0.contains(p.as_str())) {
            return Some(format!("pid {pid} {argv0}"));
        }
    }
    None
}

/// Waits (polling every 10 s, 30 min at most) until [`other_broker_user`] finds none.
pub async fn wait_for_other_users(patterns: &[String]) -> anyhow::Result<()> {
    let started = Instant::now();
    while let Some(user) = other_broker_user(patterns) {
        anyhow::ensure!(
            started.elapsed() < YIELD_LIMIT,
            "the broker was still in use after {} min ({user}); not stopping it",
            YIELD_LIMIT.as_secs() / 60
        );
        eprintln!("[recovery] waiting: the broker is in use by {user} (--recovery-yield-to)");
        tokio::time::sleep(YIELD_POLL).await;
    }
    Ok(())
}

/// The local node's app, stopped: started again by [`start`](Self::start),
/// or on drop (an error or a panic on the way), or on Ctrl-C or SIGTERM.
pub struct StoppedBroker {
    restarted: bool,
}

impl StoppedBroker {
    /// `rabbitmqctl stop_app`; returns how long it took. A failure starts the
    /// app again (the command may have stopped it anyway).
    pub async fn stop() -> anyhow::Result<(Self, Duration)> {
        watch_signals();
        BROKER_STOPPED.store(true, Ordering::SeqCst);
        let stopped = Self { restarted: false };
        let took = rabbitmqctl("stop_app").await?;
        Ok((stopped, took))
    }

    /// `rabbitmqctl start_app`; returns how long it took.
    pub async fn start(mut self) -> anyhow::Result<Duration> {
        let took = rabbitmqctl("start_app").await?;
        self.restarted = true;
        BROKER_STOPPED.store(false, Ordering::SeqCst);
        Ok(took)
    }
}

impl Drop for StoppedBroker {
    fn drop(&mut self) {
        if !self.restarted && BROKER_STOPPED.swap(false, Ordering::SeqCst) {
            eprintln!("[recovery] starting RabbitMQ again ({RABBITMQCTL} start_app)");
            match std::process::Command::new(RABBITMQCTL).arg("start_app").status() {
                Ok(status) if status.success() => {}
                outcome => eprintln!("[recovery] {RABBITMQCTL} start_app failed ({outcome:?}): start it by hand"),
            }
        }
    }
}

/// Runs `rabbitmqctl <command>`; returns how long it took, or why it failed.
async fn rabbitmqctl(command: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let run = tokio::process::Command::new(RABBITMQCTL).arg(command).kill_on_drop(true).output();
    let output = tokio::time::timeout(COMMAND_LIMIT, run)
        .await
        .map_err(|_| anyhow::anyhow!("`{RABBITMQCTL} {command}` took over {} s", COMMAND_LIMIT.as_secs()))?
        .map_err(|error| anyhow::anyhow!("could not run `{RABBITMQCTL} {command}`: {error}"))?;
    anyhow::ensure!(
        output.status.success(),
        "`{RABBITMQCTL} {command}` failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(started.elapsed())
}

/// Once a process: on Ctrl-C or SIGTERM, starts the node's app again if this
/// process stopped it, then exits (130). The handler stays for the process'
/// life (a caught signal no longer ends the process by itself).
fn watch_signals() {
    SIGNAL_WATCHER.call_once(|| {
        tokio::spawn(async {
            #[cfg(unix)]
            let terminate = async {
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(mut terminate) => {
                        terminate.recv().await;
                    }
                    Err(_) => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let terminate = std::future::pending::<()>();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = terminate => {}
            }
            if BROKER_STOPPED.swap(false, Ordering::SeqCst) {
                eprintln!("[recovery] interrupted: starting RabbitMQ again ({RABBITMQCTL} start_app)");
                let _ = tokio::process::Command::new(RABBITMQCTL).arg("start_app").status().await;
            }
            std::process::exit(130);
        });
    });
}
