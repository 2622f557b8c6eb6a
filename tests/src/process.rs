//! Real `relayops` processes for tests where a crash (or a stop) is the point:
//! started with the test's database and namespace, killed with SIGKILL (or told
//! to stop with SIGTERM), and killed on drop so none outlives its test.
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;

use relayops_shared::config::{AwsIdentity, ContainerToken};

use crate::TestEnv;

/// A running `relayops <role>` process.
pub struct RoleProcess {
    child: Child,
}

impl RoleProcess {
    /// SIGKILL, as `kill -9` would; waits until the process is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, as a container runtime sends before it kills; does not wait.
    pub fn terminate(&self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.as_ref().is_ok_and(|status| status.success()), "kill -TERM {pid}: {sent:?}");
    }

    /// Waits (without blocking the runtime) until the process exits by itself.
    pub async fn exited(&mut self, limit: std::time::Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for RoleProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fresh file path for a process's log (`label` names it), under the
/// system's temporary directory.
pub fn log_file(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!("relayops-{label}-{}.jsonl", uuid::Uuid::new_v4().simple()))
}

/// The `relayops` binary beside the test binary (target/<profile>/relayops),
/// built on first use if `make test` did not build it already.
pub fn binary() -> PathBuf {
    static BUILT: Mutex<bool> = Mutex::new(false);
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>").to_path_buf();
    let path = profile_dir.join("relayops");
    let mut built = BUILT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !*built && !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo).args(["build", "-q", "-p", "relayops", "--bin", "relayops"]).status();
        assert!(status.is_ok_and(|s| s.success()), "building the relayops binary failed");
    }
    *built = true;
    path
}

impl TestEnv {
    /// Starts `relayops <role>` against this test's database and namespace.
    /// `extra` adds or overrides environment variables.
    pub fn spawn_role(&self, role: &str, extra: &[(&str, &str)]) -> RoleProcess {
        self.spawn_role_logging(role, extra, None)
    }

    /// Starts `relayops api` on a free loopback port (`extra` as for
    /// [`spawn_role`](Self::spawn_role)) and waits until it is ready and its
    /// publisher has reached the broker: it opens its session before its
    /// first claim (an UPDATE that finds nothing, seen through
    /// [`note_outbox_claims`](Self::note_outbox_claims)), so from then on its
    /// ingest writes rows claimed by that publisher. Returns the process and
    /// its base URL.
    pub async fn spawn_publishing_api(&self, extra: &[(&str, &str)]) -> (RoleProcess, String) {
        let address = crate::free_loopback_address();
        let mut env: Vec<(&str, &str)> = vec![("RELAYOPS_API_LISTEN", address.as_str())];
        env.extend_from_slice(extra);
        let api = self.spawn_role("api", &env);
        let replica = format!("http://{address}");
        crate::wait_until_ready(&self.http, &replica).await;
        self.note_outbox_claims().await;
        self.wait_for_sql("the api's publisher reached the broker", "SELECT count(*) > 0 FROM relayops.claims_seen")
            .await;
        (api, replica)
    }

    /// As [`spawn_role`](Self::spawn_role), with the process' logs appended to a file.
    pub fn spawn_role_logging(&self, role: &str, extra: &[(&str, &str)], log: Option<&std::path::Path>) -> RoleProcess {
        let mut command = Command::new(binary());
        command.arg(role);
        self.spawn_command(command, extra, log)
    }

    /// As [`spawn_role`](Self::spawn_role), in a private mount namespace whose
    /// `/etc/hosts` is `hosts` (root only): the process resolves names as the
    /// test says while the machine's file stays untouched.
    pub fn spawn_role_with_hosts(&self, role: &str, extra: &[(&str, &str)], hosts: &std::path::Path) -> RoleProcess {
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/hosts && exec "$@""#)
            .arg(hosts)
            .arg(binary())
            .arg(role);
        self.spawn_command(command, extra, None)
    }

    fn spawn_command(
        &self,
        mut command: Command,
        extra: &[(&str, &str)],
        log: Option<&std::path::Path>,
    ) -> RoleProcess {
        let worker = &self.config.worker;
        let delays: Vec<String> = self.broker.retry_delays_ms.iter().map(u64::to_string).collect();
        let delays = delays.join(",");
        let allow = worker.outbound_allow.to_string();
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RELAYOPS_DATABASE_URL", &self.database_url)
            .env("RELAYOPS_DATABASE_READ_URL", self.read_url.as_deref().unwrap_or_default())
            .env("RELAYOPS_DB_POOL_SIZE", "4")
            .env("RELAYOPS_AMQP_URL", &self.broker.url)
            .env("RELAYOPS_QUEUE_NAMESPACE", &self.broker.namespace)
            .env("RELAYOPS_QUEUE_EXPIRES_MS", self.broker.queue_expires_ms.unwrap_or(0).to_string())
            .env("RELAYOPS_RETRY_DELAYS_MS", delays)
            .env("RELAYOPS_READY_SHARDS", self.broker.ready_shards.to_string())
            .env("RELAYOPS_HTTP_TIMEOUT_MS", worker.request_timeout.as_millis().to_string())
            .env("RELAYOPS_LEASE_MS", worker.lease.as_millis().to_string())
            .env("RELAYOPS_WORKER_CONCURRENCY", worker.concurrency.to_string())
            .env("RELAYOPS_PUBLISHER_IDLE_MS", self.config.publisher.idle_interval.as_millis().to_string())
            .env("RELAYOPS_PUBLISHER_CLAIM_TTL_MS", self.config.publisher.claim_ttl.as_millis().to_string())
            .env("RELAYOPS_RECOVERY_GRACE_MS", self.config.publisher.recovery_grace.as_millis().to_string())
            .env("RELAYOPS_OUTBOUND_ALLOW_CIDRS", allow)
            .env("RELAYOPS_JWT_SECRET", self.config.auth.jwt_secret.clone().unwrap_or_default())
            .env("RELAYOPS_BOOTSTRAP_TOKEN", self.config.auth.bootstrap_token.clone().unwrap_or_default())
            .env("RELAYOPS_REDIS_URL", &self.config.flow.redis_url)
            .env("RELAYOPS_REDIS_PREFIX", &self.config.flow.key_prefix)
            .env("RELAYOPS_REDIS_CLUSTER", if self.config.flow.redis_cluster { "on" } else { "off" })
            .env("RELAYOPS_REDIS_TIMEOUT_MS", self.config.flow.redis_timeout.as_millis().to_string())
            .env("RELAYOPS_REDIS_RETRY_MS", self.config.flow.redis_retry.as_millis().to_string())
            .env("RELAYOPS_FLOW_LOCAL_DIVISOR", self.config.flow.local_divisor.to_string())
            .env("RELAYOPS_TENANT_RATE_PER_SEC", self.config.flow.tenant_rate_per_sec.to_string())
            .env("RELAYOPS_TENANT_BURST", self.config.flow.tenant_burst.to_string())
            .env("RELAYOPS_ENDPOINT_MAX_IN_FLIGHT", self.config.flow.endpoint_max_in_flight.to_string())
            .env("RELAYOPS_LOGIN_FAILURES_PER_ACCOUNT", self.config.login.per_account.to_string())
            .env("RELAYOPS_LOGIN_FAILURES_PER_ADDRESS", self.config.login.per_address.to_string())
            .env("RELAYOPS_LOGIN_WINDOW_SECS", self.config.login.window.as_secs().to_string())
            .env("RELAYOPS_LOG", std::env::var("RELAYOPS_LOG").unwrap_or_else(|_| "warn".into()))
            // Several workers per test: each picks a free operations port.
            .env("RELAYOPS_WORKER_HEALTH_LISTEN", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(endpoint) = &worker.aws_destination_endpoint {
            command.env("RELAYOPS_AWS_DESTINATION_ENDPOINT_URL", endpoint);
        }
        match &worker.aws_identity {
            Some(AwsIdentity::Keys(keys)) => {
                command.env("AWS_ACCESS_KEY_ID", &keys.access_key_id);
                command.env("AWS_SECRET_ACCESS_KEY", &keys.secret_access_key);
            }
            Some(AwsIdentity::Container { url, token }) => {
                command.env("AWS_CONTAINER_CREDENTIALS_FULL_URI", url);
                if let Some(ContainerToken::Value(token)) = token {
                    command.env("AWS_CONTAINER_AUTHORIZATION_TOKEN", token);
                }
            }
            None => {}
        }
        for (key, value) in extra {
            command.env(key, value);
        }
        if let Some(path) = log {
            let file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("log file");
            command.stderr(file);
        }
        RoleProcess { child: command.spawn().expect("spawn relayops") }
    }
}
