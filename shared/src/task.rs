//! Spawned tasks tied to their owner's lifetime.

/// Ends a spawned task when its owner is dropped (the owner's future ended or
/// was cancelled), so no background loop outlives what started it.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
