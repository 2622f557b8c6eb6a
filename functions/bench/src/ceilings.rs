//! The machine's own ceilings, measured in the same run so results can be read
//! as ratios: a raw Postgres transaction of ingest's shape (event + delivery +
//! outbox row, synchronous commit, real WAL-logged tables in a scratch schema),
//! and a raw RabbitMQ publish loop with pipelined confirms to a quorum queue.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use relayops_shared::config::BrokerConfig;
use relayops_shared::db::Pool;

const SCHEMA: &str = "relayops_bench_ceiling";

/// Transactions per second of ingest's shape, with `connections` in parallel.
pub async fn postgres(pool: &Pool, connections: usize, duration: Duration) -> anyhow::Result<f64> {
    let client = pool.get().await?;
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA};
             CREATE TABLE {SCHEMA}.events (LIKE relayops.events INCLUDING ALL);
             CREATE TABLE {SCHEMA}.deliveries (LIKE relayops.deliveries INCLUDING ALL);
             CREATE TABLE {SCHEMA}.outbox (LIKE relayops.outbox_messages INCLUDING ALL);"
        ))
        .await?;
    drop(client);
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (pool, done) = (pool.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = pool.get().await?;
            let tenant = uuid::Uuid::now_v7();
            // Prepared once per connection, as RelayOps' own statements are.
            let insert_event = client
                .prepare_cached(&format!("INSERT INTO {SCHEMA}.events (id, tenant_id, event_type, payload, request_hash) VALUES ($1, $2, 'bench.x', '{{\"n\": 1}}', sha256('x'))"))
                .await?;
            let insert_delivery = client
                .prepare_cached(&format!("INSERT INTO {SCHEMA}.deliveries (id, tenant_id, event_id, endpoint_id) VALUES ($1, $2, $3, $2)"))
                .await?;
            let insert_outbox = client
                .prepare_cached(&format!("INSERT INTO {SCHEMA}.outbox (tenant_id, delivery_id, envelope) VALUES ($1, $2, '{{}}')"))
                .await?;
            while started.elapsed() < duration {
                let (event, delivery) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
                let tx = client.transaction().await?;
                tx.execute(&insert_event, &[&event, &tenant]).await?;
                tx.execute(&insert_delivery, &[&delivery, &tenant, &event]).await?;
                tx.execute(&insert_outbox, &[&tenant, &delivery]).await?;
                tx.commit().await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    pool.get().await?.batch_execute(&format!("DROP SCHEMA {SCHEMA} CASCADE")).await?;
    Ok(rate)
}

/// Persistent messages per second to a quorum queue, confirms pipelined in windows.
pub async fn rabbitmq(broker: &BrokerConfig, duration: Duration) -> anyhow::Result<f64> {
    let connection = relayops_shared::broker::connect(broker, "relayops-bench-ceiling").await?;
    let channel = connection.create_channel().await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let queue = format!("relayops-bench-ceiling-{}", uuid::Uuid::new_v4().simple());
    let mut arguments = FieldTable::default();
    arguments.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    channel.queue_declare(&queue, QueueDeclareOptions { durable: true, ..Default::default() }, arguments).await?;
    let body = br#"{"type":"delivery.v1","tenant_id":"ten_x","delivery_id":"dlv_x"}"#;
    let started = Instant::now();
    let mut sent = 0u64;
    while started.elapsed() < duration {
        let mut confirms = Vec::with_capacity(256);
        for _ in 0..256 {
            let properties = BasicProperties::default().with_delivery_mode(2);
            confirms.push(channel.basic_publish("", &queue, BasicPublishOptions::default(), body, properties).await?);
        }
        for confirm in confirms {
            confirm.await?;
            sent += 1;
        }
    }
    let rate = sent as f64 / started.elapsed().as_secs_f64();
    channel.queue_delete(&queue, QueueDeleteOptions::default()).await?;
    Ok(rate)
}
