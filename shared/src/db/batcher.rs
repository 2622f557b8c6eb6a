//! Group commit for hot statements. Concurrent callers each hand in one item
//! and wait for its own result; a collector task runs whatever has gathered as
//! ONE statement (one round trip, one commit, one WAL flush) on one of a few
//! lanes. Nothing waits for a batch to fill: an item that finds a free lane runs
//! at once (a batch of one), so batches only grow while every lane is busy —
//! under load, exactly when sharing a commit pays.
//!
//! Each caller gets its own result only after the statement that carried its
//! item committed, so callers keep their per-item guarantees (the worker still
//! acks a message only after its row committed). If the statement fails, every
//! caller in that batch gets the failure.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::db::DbError;

/// Runs one batch: one output per item, in the same order.
pub type BatchFn<I, O> =
    Arc<dyn Fn(Vec<I>) -> Pin<Box<dyn Future<Output = Result<Vec<O>, DbError>> + Send>> + Send + Sync>;

type Request<I, O> = (I, oneshot::Sender<Result<O, Arc<DbError>>>);

/// Size and parallelism of a batcher.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits {
    /// At most this many items per statement.
    pub max_items: usize,
    /// At most this many statements running at once (each holds a connection).
    pub lanes: usize,
}

/// A handle to a running collector; cheap to clone. The collector ends when
/// the last handle is dropped.
pub struct Batcher<I, O> {
    requests: mpsc::UnboundedSender<Request<I, O>>,
}

impl<I, O> Clone for Batcher<I, O> {
    fn clone(&self) -> Self {
        Self { requests: self.requests.clone() }
    }
}

/// Why a batched call has no result.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("batched statement failed")]
    Failed(#[source] Arc<DbError>),
    /// The collector is gone (the runtime is shutting down).
    #[error("batcher stopped")]
    Stopped,
}

impl BatchError {
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Failed(error) => error.is_unavailable(),
            Self::Stopped => true,
        }
    }
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the collector on the current Tokio runtime.
    pub fn spawn(limits: BatchLimits, run: BatchFn<I, O>) -> Self {
        let (requests, incoming) = mpsc::unbounded_channel();
        tokio::spawn(collect(incoming, limits, run));
        Self { requests }
    }

    /// Submits one item and waits for its result.
    pub async fn call(&self, item: I) -> Result<O, BatchError> {
        let (reply, result) = oneshot::channel();
        self.requests.send((item, reply)).map_err(|_| BatchError::Stopped)?;
        match result.await {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(error)) => Err(BatchError::Failed(error)),
            Err(_) => Err(BatchError::Stopped),
        }
    }
}

async fn collect<I: Send + 'static, O: Send + 'static>(
    mut incoming: mpsc::UnboundedReceiver<Request<I, O>>,
    limits: BatchLimits,
    run: BatchFn<I, O>,
) {
    let lanes = Arc::new(Semaphore::new(limits.lanes.max(1)));
    let max_items = limits.max_items.max(1);
    while let Some(first) = incoming.recv().await {
        // Wait for a free lane first: while all are busy, items gather behind it.
        let Ok(lane) = Arc::clone(&lanes).acquire_owned().await else { return };
        let mut batch = vec![first];
        while batch.len() < max_items {
            match incoming.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        let run = Arc::clone(&run);
        tokio::spawn(async move {
            let (items, replies): (Vec<I>, Vec<_>) = batch.into_iter().unzip();
            let expected = items.len();
            match run(items).await {
                Ok(outputs) if outputs.len() == expected => {
                    for (reply, output) in replies.into_iter().zip(outputs) {
                        let _ = reply.send(Ok(output));
                    }
                }
                Ok(outputs) => {
                    let message = format!("batch returned {} results for {expected} items", outputs.len());
                    let error = Arc::new(DbError::Pool(message));
                    for reply in replies {
                        let _ = reply.send(Err(Arc::clone(&error)));
                    }
                }
                Err(error) => {
                    let error = Arc::new(error);
                    for reply in replies {
                        let _ = reply.send(Err(Arc::clone(&error)));
                    }
                }
            }
            drop(lane);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn doubling(batches: Arc<AtomicUsize>, gate: Arc<tokio::sync::Notify>) -> BatchFn<u32, u32> {
        Arc::new(move |items: Vec<u32>| {
            let batches = Arc::clone(&batches);
            let gate = Arc::clone(&gate);
            Box::pin(async move {
                batches.fetch_add(1, Ordering::SeqCst);
                gate.notified().await;
                Ok(items.into_iter().map(|item| item * 2).collect())
            })
        })
    }

    #[tokio::test]
    async fn items_that_arrive_while_the_lane_is_busy_share_one_batch_and_get_their_own_results() {
        let batches = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let batcher = Batcher::spawn(BatchLimits { max_items: 100, lanes: 1 }, doubling(batches.clone(), gate.clone()));
        let first = tokio::spawn({
            let batcher = batcher.clone();
            async move { batcher.call(1).await.unwrap() }
        });
        // The first item runs alone and holds the only lane.
        while batches.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let rest: Vec<_> = (2..=10)
            .map(|item| {
                let batcher = batcher.clone();
                tokio::spawn(async move { batcher.call(item).await.unwrap() })
            })
            .collect();
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        assert_eq!(first.await.unwrap(), 2);
        // Released one at a time: the second batch holds all nine waiting items.
        while batches.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        for (index, handle) in rest.into_iter().enumerate() {
            assert_eq!(handle.await.unwrap(), (index as u32 + 2) * 2);
        }
        assert_eq!(batches.load(Ordering::SeqCst), 2, "nine waiting items went in one statement");
    }

    #[tokio::test]
    async fn a_failed_statement_fails_every_caller_in_it() {
        let run: BatchFn<u32, u32> = Arc::new(|_items| Box::pin(async { Err(DbError::Pool("down".into())) }));
        let batcher = Batcher::spawn(BatchLimits { max_items: 10, lanes: 2 }, run);
        let error = batcher.call(1).await.unwrap_err();
        assert!(error.is_unavailable(), "{error}");
    }
}
