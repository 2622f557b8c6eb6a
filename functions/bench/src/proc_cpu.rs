//! CPU time used so far by the processes behind a run, read from Linux /proc
//! (`utime + stime` of every process, plus `cutime + cstime`: the time of
//! children it has reaped, so a Postgres backend that exits mid-run still
//! counts, in its postmaster). Processes are found by name on this machine:
//! - `postgres`: every process named `postgres` and its descendants (every
//!   cluster on the machine, whatever database it serves);
//! - `rabbitmq`: every `beam.smp` and its descendants (every node);
//! - `redis`: every `redis-server`;
//! - `relayops`: every `relayops` process started with the bench's own
//!   `RELAYOPS_DATABASE_URL` (the deployment under test and the workers the
//!   bench starts; test processes on other databases are left out), plus the
//!   children the bench has reaped;
//! - `bench`: the bench itself.
//!
//! Beside them, `postgres_own_database`: the Postgres backends now connected
//! to the bench's database alone (a lower bound of what the run cost Postgres:
//! no WAL writer, checkpointer or autovacuum, no backend that has ended, but
//! none of the other databases' load either).
//!
//! So the services' figures include any other load they carry while the
//! bench runs. Elsewhere than Linux (no /proc) there is no sample.
use std::collections::{BTreeMap, HashMap};

use relayops_shared::db::PgTarget;

/// The components a sample adds up, in report order.
pub const COMPONENTS: [&str; 4] = ["postgres", "rabbitmq", "redis", "relayops"];

/// CPU used so far, per component, in clock ticks (`ticks_per_sec` a second).
#[derive(Debug, Clone, Default)]
pub struct CpuSample {
    pub by_component: BTreeMap<&'static str, u64>,
    pub bench: u64,
    pub postgres_own_database: u64,
    pub ticks_per_sec: f64,
}

/// One process's line of `/proc/<pid>/stat`, in clock ticks.
struct ProcStat {
    comm: String,
    ppid: u32,
    /// `utime + stime`.
    own: u64,
    /// `cutime + cstime`: children it has waited for.
    reaped: u64,
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    // The name is in parentheses and may itself hold spaces or parentheses.
    let (open, close) = (text.find('(')?, text.rfind(')')?);
    let comm = text.get(open + 1..close)?.to_owned();
    // Fields from the third on (state, ppid, ...); utime is the 14th overall.
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    let tick = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(ProcStat {
        comm,
        ppid: fields.get(1)?.parse().ok()?,
        own: tick(14)? + tick(15)?,
        reaped: tick(16)? + tick(17)?,
    })
}

fn named(comm: &str) -> Option<&'static str> {
    match comm {
        "postgres" => Some("postgres"),
        "beam.smp" => Some("rabbitmq"),
        "redis-server" => Some("redis"),
        "relayops" => Some("relayops"),
        _ => None,
    }
}

/// Whether a `relayops` process serves the bench's database (unreadable
/// environments count as yes: better counted than missed).
pub fn same_database(pid: u32, database_url: Option<&str>) -> bool {
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { return true };
    let theirs = environ
        .split(|byte| *byte == 0)
        .find_map(|entry| entry.strip_prefix(b"RELAYOPS_DATABASE_URL=".as_slice()))
        .map(|url| String::from_utf8_lossy(url).into_owned());
    theirs.as_deref() == database_url
}

/// The database a connection URL names, as the services read it
/// (`db::PgTarget`, so TLS parameters and the rest are understood alike).
fn database_name(url: &str) -> Option<String> {
    PgTarget::parse(url).ok()?.config.get_dbname().map(str::to_owned)
}

/// Whether a Postgres process is a backend connected to `database`: its
/// title reads `postgres: [cluster: ]user database host(port) activity`.
fn serves_database(pid: u32, database: &str) -> bool {
    let title = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let mut words = title.split(['\0', ' ']).filter(|w| !w.is_empty() && !w.ends_with(':'));
    words.nth(1) == Some(database)
}

/// The component a process belongs to: its own name's or its nearest named
/// ancestor's.
fn component_of(pid: u32, procs: &HashMap<u32, ProcStat>) -> Option<(u32, &'static str)> {
    let mut at = pid;
    for _ in 0..64 {
        let stat = procs.get(&at)?;
        if let Some(component) = named(&stat.comm) {
            return Some((at, component));
        }
        at = stat.ppid;
    }
    None
}

#[cfg(target_os = "linux")]
fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf reads a constant of the running system; no memory is passed.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// CPU used so far; `None` where /proc cannot be read (not Linux).
#[cfg(target_os = "linux")]
pub fn sample() -> Option<CpuSample> {
    let database_url = std::env::var("RELAYOPS_DATABASE_URL").ok();
    let database = database_url.as_deref().and_then(database_name);
    let me = std::process::id();
    let mut procs = HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        // A process may end between the listing and the read: skip it.
        if let Some(stat) = std::fs::read_to_string(entry.path().join("stat")).ok().as_deref().and_then(parse_stat) {
            procs.insert(pid, stat);
        }
    }
    let mut sample = CpuSample {
        by_component: COMPONENTS.iter().map(|c| (*c, 0)).collect(),
        bench: procs.get(&me)?.own,
        postgres_own_database: 0,
        ticks_per_sec: ticks_per_sec(),
    };
    // Children the bench started and has reaped are `relayops` workers.
    *sample.by_component.entry("relayops").or_default() += procs[&me].reaped;
    for (pid, stat) in procs.iter().filter(|(pid, _)| **pid != me) {
        let Some((root, component)) = component_of(*pid, &procs) else { continue };
        if component == "relayops" && !same_database(root, database_url.as_deref()) {
            continue;
        }
        *sample.by_component.entry(component).or_default() += stat.own + stat.reaped;
        if component == "postgres" && database.as_deref().is_some_and(|db| serves_database(*pid, db)) {
            sample.postgres_own_database += stat.own;
        }
    }
    Some(sample)
}

#[cfg(not(target_os = "linux"))]
pub fn sample() -> Option<CpuSample> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_stat_line_whose_name_holds_spaces_and_parentheses() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 75 9 3 20 0 4 0 1 2 3";
        let stat = parse_stat(line).expect("parsed");
        assert_eq!((stat.comm.as_str(), stat.ppid, stat.own, stat.reaped), ("a (b) c", 17, 325, 12));
    }

    #[test]
    fn finds_the_database_name_in_a_url() {
        assert_eq!(
            database_name("postgres://u:p@127.0.0.1:5432/relayops_cost?sslmode=require"),
            Some("relayops_cost".into())
        );
        assert_eq!(database_name("postgres://u:p@127.0.0.1:5432/relayops"), Some("relayops".into()));
        assert_eq!(database_name("postgres://u:p@127.0.0.1:5432"), None);
    }
}
