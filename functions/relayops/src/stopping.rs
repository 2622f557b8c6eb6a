//! How the roles of one process stop. On Ctrl-C or SIGTERM (what a container
//! runtime sends before it kills) the api stops taking connections and
//! answers the requests it has, its publisher publishes the rows those
//! requests handed it, and the worker takes no new message and finishes the
//! deliveries under way (answered, recorded, acknowledged). The process waits
//! for them, up to [`STOP_GRACE`], then stops every role as it is. Nothing is
//! lost either way: what is cut short is what a crash leaves (unacknowledged
//! messages go back to the queue; leases and claims expire and are taken up
//! again), only later.
use std::collections::HashSet;
use std::future::Future;

use relayops_shared::task::{stop_signal, STOP_GRACE};
use tokio::sync::watch;
use tokio::task::{Id, JoinSet};

/// What a role's task ends with (it ends on its own only by failing).
pub type RoleResult = anyhow::Result<()>;

/// The roles running on background tasks, and how they stop.
pub struct Running {
    tasks: JoinSet<RoleResult>,
    /// Turns true when the process is told to stop.
    stopping: watch::Sender<bool>,
    /// The tasks that finish by themselves once told to stop.
    finishing: HashSet<Id>,
}

impl Default for Running {
    fn default() -> Self {
        Self { tasks: JoinSet::new(), stopping: watch::channel(false).0, finishing: HashSet::new() }
    }
}

impl Running {
    /// A role that runs until the process stops it.
    pub fn spawn(&mut self, role: impl Future<Output = RoleResult> + Send + 'static) {
        self.tasks.spawn(role);
    }

    /// A role that finishes its work and returns once the receiver it is
    /// given turns true; the process waits for it, up to [`STOP_GRACE`].
    pub fn spawn_finishing<F>(&mut self, role: impl FnOnce(watch::Receiver<bool>) -> F)
    where
        F: Future<Output = RoleResult> + Send + 'static,
    {
        let id = self.tasks.spawn(role(self.stopping.subscribe())).id();
        self.finishing.insert(id);
    }
}

/// Waits for Ctrl-C or SIGTERM, then stops the roles (see the module). A
/// role that ends before that has failed: the process stops with its error.
pub async fn wait(mut running: Running) -> anyhow::Result<()> {
    tokio::select! {
        signal = stop_signal() => tracing::info!(signal, "shutting down"),
        Some(ended) = running.tasks.join_next() => {
            ended??;
            anyhow::bail!("a role stopped unexpectedly");
        }
    }
    running.stopping.send_replace(true);
    let finishing = async {
        while !running.finishing.is_empty() {
            let Some(ended) = running.tasks.join_next_with_id().await else { break };
            let id = match ended {
                Ok((id, Err(error))) => {
                    tracing::warn!(error = %error, "a role failed while stopping");
                    id
                }
                Ok((id, Ok(()))) => id,
                Err(error) => error.id(),
            };
            running.finishing.remove(&id);
        }
    };
    if tokio::time::timeout(STOP_GRACE, finishing).await.is_err() {
        tracing::warn!(grace_ms = STOP_GRACE.as_millis() as u64, "roles still finishing when the grace ran out");
    }
    running.tasks.shutdown().await;
    Ok(())
}
