//! The upgrade of a populated installation to partitioned history (issue 14):
//! a database built at migration 0006 and filled as that release did, then
//! migrated the rest of the way; every row is still there and usable. And
//! the subscriber patterns function as 0017 released it and 0018 replaced it.
use std::time::Instant;

use relayops_shared::config::HistoryConfig;
use relayops_shared::db::{migrate, partitions};
use relayops_shared::domain::{DeliveryStatus, EventPayload, EventType, IdempotencyKey};
use relayops_shared::ids::{DeliveryId, TenantId};
use relayops_shared::repo::delivery_queries::{list_deliveries, DeliveryFilter, TimeKey};
use relayops_shared::repo::events::{insert_event_with_deliveries, IngestOutcome, NewEvent};
use relayops_shared::repo::{attempts, deliveries, replay};
use relayops_tests::scratch::{inline_params, uuid_literal, ScratchDatabase};
use serde_json::json;

/// Rows per table in the upgrade test; `RELAYOPS_UPGRADE_EVENTS` makes it a
/// measurement (the swap's pause at a million rows, 0.37 s: BENCHMARKS.md,
/// "What we tried that did not help"; each step's time in the BENCHMARKS.md
/// of commit `1e9a367`, "History partitions").
fn upgrade_events() -> i64 {
    std::env::var("RELAYOPS_UPGRADE_EVENTS").ok().and_then(|n| n.parse().ok()).unwrap_or(3_000)
}

/// The schema of 0006, filled as the release before partitioning did: v7
/// event ids spread over the last 10 days, random (v4) delivery ids, one
/// delivery per event (every 10th dead, every 100th pending, the rest
/// delivered), an attempt per settled delivery, published outbox rows, and
/// an idempotency key on every event.
const POPULATE: &str = "
INSERT INTO relayops.tenants (id, name) VALUES ($1, 'upgraded');
INSERT INTO relayops.webhook_endpoints (id, tenant_id, url, secret)
    VALUES ($2, $1, 'http://127.0.0.1:9/hook', 'whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdA==');
INSERT INTO relayops.endpoint_subscriptions (id, tenant_id, endpoint_id, event_type_pattern)
    VALUES (gen_random_uuid(), $1, $2, '*');
CREATE TEMP TABLE seed AS
SELECT i, at,
       (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7'
        || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid AS event_id,
       gen_random_uuid() AS delivery_id,
       CASE WHEN i % 10 = 0 THEN 'dead' WHEN i % 100 = 1 THEN 'pending' ELSE 'delivered' END AS status
FROM (SELECT i, now() - (($3::bigint - i) * interval '10 days' / $3::bigint) AS at
      FROM generate_series(1, $3::bigint) AS i) AS s;
INSERT INTO relayops.events (id, tenant_id, event_type, payload, idempotency_key, request_hash, received_at)
SELECT event_id, $1, 'order.created', jsonb_build_object('n', i), 'key-' || i,
       sha256(convert_to('order.created', 'UTF8') || '\\x00'::bytea || convert_to('{\"n\":' || i || '}', 'UTF8')), at
FROM seed;
INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id, status, attempt_count, created_at, updated_at)
SELECT delivery_id, $1, event_id, $2, status, CASE WHEN status = 'pending' THEN 0 ELSE 1 END, at, at FROM seed;
INSERT INTO relayops.delivery_attempts (id, tenant_id, delivery_id, attempt_number, outcome, http_status,
                                        latency_ms, worker_id, started_at, finished_at)
SELECT (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint + 5), 12, '0') || '7'
        || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid,
       $1, delivery_id, 1, status, CASE WHEN status = 'dead' THEN 500 ELSE 200 END, 12, 'w', at, at
FROM seed WHERE status <> 'pending';
INSERT INTO relayops.outbox_messages (tenant_id, delivery_id, envelope, status, published_at)
SELECT $1, delivery_id, '{}'::jsonb, 'published', at FROM seed;
DROP TABLE seed;";

async fn counts(client: &tokio_postgres::Client) -> Vec<i64> {
    let mut counts = Vec::new();
    for table in ["events", "deliveries", "delivery_attempts"] {
        let row = client.query_one(&format!("SELECT count(*) FROM relayops.{table}"), &[]).await.unwrap();
        counts.push(row.get(0));
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_keeps_every_row_of_a_populated_database_and_its_uses() {
    let db = ScratchDatabase::create().await;
    let mut client = db.pool.get().await.unwrap();
    migrate::run_through(&mut client, "0006_pending_sweep_index").await.unwrap();
    let (tenant, endpoint, events) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7(), upgrade_events());
    let script = inline_params(POPULATE, &[uuid_literal(tenant), uuid_literal(endpoint), events.to_string()]);
    client.batch_execute(&script).await.unwrap();
    client.batch_execute("ANALYZE").await.unwrap();
    let before = counts(&client).await;
    let outbox = "SELECT count(*) FROM relayops.outbox_messages";
    assert_eq!(client.query_one(outbox, &[]).await.unwrap().get::<_, i64>(0), events);
    let dead: uuid::Uuid = client
        .query_one("SELECT id FROM relayops.deliveries WHERE status = 'dead' ORDER BY created_at LIMIT 1", &[])
        .await
        .unwrap()
        .get(0);

    // The rest, with each step timed (the swap is the pause writers see).
    let started = Instant::now();
    migrate::run_through(&mut client, "0007_history_partitioning_prepare").await.unwrap();
    let prepare = started.elapsed();
    let started = Instant::now();
    migrate::run_through(&mut client, "0008_history_partitioning_swap").await.unwrap();
    let swap = started.elapsed();
    migrate::run(&mut client).await.unwrap();
    println!("upgrade of {events} events: prepare (no pause) {prepare:?}, swap (the pause) {swap:?}");
    partitions::ensure(&client, &HistoryConfig::default()).await.unwrap();

    assert_eq!(counts(&client).await, before, "every row is still there");
    let left: i64 = client.query_one(outbox, &[]).await.unwrap().get(0);
    assert_eq!(left, 0, "outbox rows published before the upgrade are not kept (0011)");
    let legacy = partitions::list(&client, partitions::DELIVERIES).await.unwrap();
    assert_eq!(legacy[0].name, "deliveries_legacy", "the old rows are one partition: {legacy:?}");
    assert_eq!(legacy[0].from_ms, None);

    // A dead letter from before the upgrade (a random id) can be found, its
    // attempts read, and replayed.
    let tenant = TenantId::from_uuid(tenant);
    let dead = DeliveryId::from_uuid(dead);
    let record = deliveries::get_delivery(&client, tenant, dead).await.unwrap().expect("old delivery found by id");
    assert_eq!(record.status, "dead");
    let history = attempts::list_attempts(&client, tenant, dead, 0, 10).await.unwrap();
    assert_eq!(history.len(), 1, "its attempt is readable");
    let tx = client.transaction().await.unwrap();
    let replayed = replay::replay_delivery(&tx, tenant, dead).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(replayed, replay::ReplayOutcome::Replayed(DeliveryStatus::Dead));

    // Lists page through all of it, newest first, each row once.
    let mut seen = std::collections::HashSet::new();
    let mut after: Option<TimeKey> = None;
    loop {
        let page = list_deliveries(&client, tenant, &DeliveryFilter::default(), after, 1_000).await.unwrap();
        let Some(last) = page.last() else { break };
        after = Some(TimeKey { at: last.created_at, id: last.id.as_uuid() });
        for row in &page {
            assert!(seen.insert(row.id), "a row appears on two pages");
        }
    }
    assert_eq!(seen.len() as i64, before[1], "a walk through the pages sees every delivery");

    // A key used before the upgrade (within its window) still answers with
    // its event; a new event goes in next to the old ones.
    let event_type = EventType::parse("order.created").unwrap();
    let payload = EventPayload::parse(json!({"n": events})).unwrap();
    let key = IdempotencyKey::parse(&format!("key-{events}")).unwrap();
    let repeat =
        NewEvent { event_type: &event_type, payload: &payload, idempotency_key: Some(&key), ordering_key: None };
    match insert_event_with_deliveries(&client, tenant, &repeat).await.unwrap() {
        IngestOutcome::Duplicate(receipt) => assert_eq!(receipt.deliveries, 1),
        other => panic!("the old key is still honoured, got {other:?}"),
    }
    let fresh = NewEvent { event_type: &event_type, payload: &payload, idempotency_key: None, ordering_key: None };
    let IngestOutcome::Created(created) = insert_event_with_deliveries(&client, tenant, &fresh).await.unwrap() else {
        panic!("a new event is stored");
    };
    assert_eq!(created.deliveries, 1);
}

/// Ingest's subscriber lookup asks `relayops.patterns_matching(type)` for the
/// patterns to look up; it must agree with `EventTypePattern::matches` (what
/// the API documents) for every type and pattern, both as `0017` released it
/// (SQL) and as `0018` replaced it (PL/pgSQL) on a database upgraded from
/// `0017`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_matching_agrees_with_the_rust_rule_before_and_after_its_rewrite() {
    use relayops_shared::domain::EventTypePattern;
    let types = ["a", "ab", "a.b", "a.bc", "a.b.c", "a.b.cd", "ab.c", "x-y.z_1", "a.b.c.d.e"];
    let mut patterns: Vec<String> = vec!["*".into(), "a.b.c.*".into(), "a.bc.*".into(), "ab.*".into(), "b.*".into()];
    for event_type in types {
        patterns.push(event_type.to_owned());
        patterns.push(format!("{event_type}.*"));
    }
    let db = ScratchDatabase::create().await;
    let mut client = db.pool.get().await.unwrap();
    for through in ["0017_subscriptions_by_pattern", migrate::latest_version()] {
        migrate::run_through(&mut client, through).await.unwrap();
        for event_type in types {
            let row = client.query_one("SELECT relayops.patterns_matching($1)", &[&event_type]).await.unwrap();
            let listed: Vec<String> = row.get(0);
            let parsed = EventType::parse(event_type).unwrap();
            for pattern in &patterns {
                let rule = EventTypePattern::parse(pattern).unwrap().matches(&parsed);
                assert_eq!(
                    listed.contains(pattern),
                    rule,
                    "at {through}: type {event_type}, pattern {pattern}: {listed:?}"
                );
            }
            let distinct: std::collections::BTreeSet<&String> = listed.iter().collect();
            assert_eq!(distinct.len(), listed.len(), "at {through}: {event_type} lists a pattern twice: {listed:?}");
        }
    }
}
