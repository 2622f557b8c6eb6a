//! Sampled gauges: the outbox backlog and the depth of every queue (each ready shard,
//! each retry delay, the operations DLQ), measured on an interval by a
//! background task — never per request. A measurement that cannot be taken
//! leaves the gauge at its last value and is logged at debug level; readiness,
//! not a gauge, is what reports an unreachable dependency.
use std::time::Duration;

use super::names::{OUTBOX_BACKLOG, QUEUE_DEPTH};
use crate::broker::{self, Topology};
use crate::config::BrokerConfig;
use crate::db::Pool;
use crate::repo::outbox;

/// Starts sampling every `interval` on a background task.
pub fn spawn_queue_gauges(pool: Pool, broker: BrokerConfig, interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let topology = Topology::new(&broker);
        // `ready` is `<ns>.ready`; first-attempt shards are `ready_<i>`.
        let mut queues: Vec<(String, String)> = topology
            .ready_shards
            .all()
            .iter()
            .map(|shard| (shard.routing_key.replace('.', "_"), shard.queue.clone()))
            .collect();
        for bucket in &topology.retry_buckets {
            queues.push((format!("retry_{}", bucket.key), bucket.queue.clone()));
        }
        queues.push(("dead".to_owned(), topology.dead_queue.clone()));
        let mut channel: Option<(std::sync::Arc<lapin::Connection>, lapin::Channel)> = None;
        loop {
            if let Ok(client) = pool.get().await {
                match outbox::backlog(&client).await {
                    Ok(backlog) => metrics::gauge!(OUTBOX_BACKLOG).set(backlog as f64),
                    Err(error) => tracing::debug!(error = %error, "outbox backlog not sampled"),
                }
            }
            let usable = channel.as_ref().is_some_and(|(c, ch)| c.status().connected() && ch.status().connected());
            if !usable {
                channel = open(&broker).await;
            }
            if let Some((_, open_channel)) = &channel {
                for (label, queue) in &queues {
                    let depth = tokio::time::timeout(Duration::from_secs(2), broker::queue_depth(open_channel, queue));
                    match depth.await {
                        Ok(Ok(depth)) => metrics::gauge!(QUEUE_DEPTH, "queue" => label.clone()).set(f64::from(depth)),
                        _ => {
                            // A failed passive declare closes the channel; reopen next round.
                            tracing::debug!(queue = %queue, "queue depth not sampled");
                            channel = None;
                            break;
                        }
                    }
                }
            }
            tokio::time::sleep(interval).await;
        }
    })
}

/// Connects and declares the topology (idempotent), so the passive declares
/// that measure depths never race a fresh installation's first start.
async fn open(config: &BrokerConfig) -> Option<(std::sync::Arc<lapin::Connection>, lapin::Channel)> {
    let connection = broker::connect(config, "relayops-gauges").await.ok()?;
    let channel = broker::open_channel(&connection).await.ok()?;
    Topology::new(config).declare(&channel).await.ok()?;
    Some((connection, channel))
}
