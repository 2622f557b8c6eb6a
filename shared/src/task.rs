//! Spawned tasks tied to their owner's lifetime, and loops told to stop.

/// Ends a spawned task when its owner is dropped (the owner's future ended or
/// was cancelled), so no background loop outlives what started it.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves once `stopping` turns true (the process is stopping); never, if
/// its sender is gone without having said so.
pub async fn stop_requested(stopping: &mut tokio::sync::watch::Receiver<bool>) {
    if stopping.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A `stopping` receiver that never turns true (for a loop run until the
/// process ends).
pub fn never_stopping() -> tokio::sync::watch::Receiver<bool> {
    tokio::sync::watch::channel(false).1
}

/// How long a process told to stop gives its roles to finish what they have
/// under way: within the 10 s that Docker and ECS leave between SIGTERM and
/// SIGKILL by default.
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(8);

/// Resolves when the process is told to stop, with the signal's name:
/// Ctrl-C (`interrupt`) or SIGTERM (`terminate`, what a container runtime sends).
pub async fn stop_signal() -> &'static str {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => signal.recv().await,
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupt",
        _ = terminate => "terminate",
    }
}
