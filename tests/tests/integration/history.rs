//! History that does not grow forever (issue 14): the partition manager
//! (created ahead, dropped after the retention, never while a delivery is
//! unfinished; a soak; the delivery id index, rebuilt when a build fails),
//! pruning in list plans, the idempotency window,
//! tenants' shorter retention. The upgrade of a populated database is in
//! `upgrade`.
use std::time::{Duration, Instant};

use relayops_shared::config::HistoryConfig;
use relayops_shared::db::{migrate, partitions};
use relayops_shared::ids::{EventId, TenantId};
use relayops_shared::repo::delivery_queries::{list_deliveries, DeliveryFilter, TimeKey};
use relayops_tests::scratch::{inline_params, uuid_literal, ScratchDatabase};
use serde_json::json;

/// A test env whose history windows are short, with the publisher's own
/// maintenance off (the test runs passes itself, so it knows when).
fn short_history(window: Duration, retention: Duration) -> relayops_tests::TestConfig {
    let mut config = relayops_tests::TestConfig::default();
    config.publisher.history =
        HistoryConfig { partition: window, ahead: 2, retention, maintenance_interval: Duration::from_secs(3600) };
    config
}

/// Sleeps until the clock enters the next window after `id`'s: moving
/// through time windows is what the partition manager is about.
async fn into_the_window_after(id: uuid::Uuid, window: Duration) {
    let window_ms = window.as_millis() as i64;
    let next = (partitions::uuid_millis(id) / window_ms + 1) * window_ms;
    let now = partitions::uuid_millis(uuid::Uuid::now_v7());
    tokio::time::sleep(Duration::from_millis((next - now).max(0) as u64 + 20)).await;
}

fn event_uuid(answer: &relayops_tests::Answer) -> (String, uuid::Uuid) {
    let id = answer.body["id"].as_str().expect("event id").to_owned();
    let uuid = id.parse::<EventId>().expect("an event id").as_uuid();
    (id, uuid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_partitions_are_dropped_but_never_one_holding_an_unfinished_delivery() {
    let window = Duration::from_secs(2);
    let config = short_history(window, Duration::from_secs(3));
    let history = config.publisher.history.clone();
    let mut env = relayops_tests::TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["order.*"], json!({})).await;
    let client = env.pool.get().await.unwrap();
    // On a busy machine, starting up or waiting can outlast the 2 s windows
    // made ahead (maintenance runs only when this test says): make them
    // before each event.
    partitions::ensure(&client, &history).await.unwrap();
    let (delivered, first) = event_uuid(&env.post_event("order.created", json!({"n": 1})).await);
    env.wait_for_status(&delivered, "delivered").await;
    // An unfinished delivery in a later window: no worker to send it.
    env.kill_worker().await;
    into_the_window_after(first, window).await;
    partitions::ensure(&client, &history).await.unwrap();
    let (stuck, _) = event_uuid(&env.post_event("order.created", json!({"n": 2})).await);

    let dropped = std::sync::Mutex::new(Vec::<String>::new());
    let dropped = &dropped;
    let report = relayops_tests::eventually(Duration::from_secs(30), || async {
        let report = partitions::maintain(&client, &history).await.map_err(|e| e.to_string())?;
        dropped.lock().unwrap().extend(report.dropped.clone());
        let gone = env.get(&format!("/v1/events/{delivered}")).await.status == 404;
        if gone && !report.kept.is_empty() {
            Ok(report)
        } else {
            Err(format!("first event gone: {gone}; {report:?}"))
        }
    })
    .await;
    let so_far = dropped.lock().unwrap().clone();
    assert!(so_far.iter().any(|name| name.starts_with("deliveries_p")), "{so_far:?}");
    let pending = env.get(&format!("/v1/events/{stuck}/deliveries")).await;
    assert_eq!(pending.body["data"][0]["status"], "pending", "the unfinished delivery is kept: {report:?}");
    let ahead = partitions::list(&client, partitions::EVENTS).await.unwrap();
    assert!(
        ahead.last().unwrap().to_ms > partitions::uuid_millis(uuid::Uuid::now_v7()) + window.as_millis() as i64,
        "windows ahead exist: {ahead:?}"
    );

    // Once it is delivered, its window goes too, and the attempts (made
    // later, in later windows) after theirs.
    partitions::ensure(&client, &history).await.unwrap();
    env.start_worker().await;
    env.wait_for_status(&stuck, "delivered").await;
    relayops_tests::eventually(Duration::from_secs(30), || async {
        let report = partitions::maintain(&client, &history).await.map_err(|e| e.to_string())?;
        dropped.lock().unwrap().extend(report.dropped.clone());
        let gone = env.get(&format!("/v1/events/{stuck}")).await.status == 404;
        let attempts: i64 =
            client.query_one("SELECT count(*) FROM relayops.delivery_attempts", &[]).await.unwrap().get(0);
        (gone && attempts == 0).then_some(()).ok_or_else(|| format!("attempts left: {attempts}; {report:?}"))
    })
    .await;
    let so_far = dropped.lock().unwrap().clone();
    assert!(so_far.iter().any(|name| name.starts_with("delivery_attempts_p")), "{so_far:?}");
}

/// Events (with one delivery each) at `minutes` from now, written directly:
/// their windows exist because the manager creates them ahead.
const SEED_WINDOWS: &str = "
INSERT INTO relayops.tenants (id, name) VALUES ($1, 'plans');
INSERT INTO relayops.webhook_endpoints (id, tenant_id, url, secret)
    VALUES ($2, $1, 'http://127.0.0.1:9/hook', 'whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdA==');
WITH e AS (
    INSERT INTO relayops.events (id, tenant_id, event_type, payload, request_hash, received_at)
    SELECT (left(relayops.uuid_floor(now() + m * interval '1 minute')::text, 13) || '-7' || substr(gen_random_uuid()::text, 16))::uuid,
           $1, 'order.created', '{}'::jsonb, sha256('x'::bytea), now() + m * interval '1 minute'
    FROM unnest($3::float8[]) AS m
    RETURNING id, received_at)
INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id, created_at)
SELECT relayops.delivery_id_for(e.id), $1, e.id, $2, e.received_at FROM e;";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_read_only_the_partitions_their_cursor_and_filters_reach() {
    use relayops_shared::repo::event_queries::{explain_list_events, list_events, EventFilter};
    let db = ScratchDatabase::create().await;
    let mut client = db.pool.get().await.unwrap();
    migrate::run(&mut client).await.unwrap();
    let history = HistoryConfig { partition: Duration::from_secs(60), ahead: 8, ..HistoryConfig::default() };
    partitions::ensure(&client, &history).await.unwrap();
    let (tenant, endpoint) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let windows = "ARRAY[0.5, 2.5, 4.5, 6.5, 7.5]".to_owned();
    let script = inline_params(SEED_WINDOWS, &[uuid_literal(tenant), uuid_literal(endpoint), windows]);
    client.batch_execute(&script).await.unwrap();
    client.batch_execute("ANALYZE").await.unwrap();
    let tenant = TenantId::from_uuid(tenant);
    let all = partitions::list(&client, partitions::EVENTS).await.unwrap();
    let scanned = |plan: &[String], table: &str| -> Vec<String> {
        let all = all.iter().map(|p| p.name.replace("events", table));
        all.filter(|name| plan.iter().any(|line| line.contains(&format!(" {name} ")))).collect()
    };

    // The first page reads every window (newest first, it stops early).
    let page = list_events(&client, tenant, &EventFilter::default(), None, 3).await.unwrap();
    assert_eq!(page.len(), 3);
    // The next page, from a cursor at +4.5 min: windows that start after the
    // cursor (plus a minute of clock slack) are skipped.
    let cursor = TimeKey { at: page[2].received_at, id: page[2].id.as_uuid() };
    let page = list_events(&client, tenant, &EventFilter::default(), Some(cursor), 10).await.unwrap();
    assert_eq!(page.len(), 2, "the rest, across partitions");
    let plan = explain_list_events(&client, tenant, &EventFilter::default(), Some(cursor), 10).await.unwrap();
    let read = scanned(&plan, "events");
    let bound = partitions::uuid_millis(cursor.id) + 60_000;
    let beyond: Vec<_> = all.iter().filter(|p| p.from_ms.unwrap() > bound).map(|p| p.name.clone()).collect();
    assert!(!beyond.is_empty() && !read.is_empty(), "{all:?}");
    assert!(beyond.iter().all(|name| !read.contains(name)), "a cursor prunes {beyond:?}: reads {read:?}\n{plan:#?}");

    // A time filter prunes deliveries the same way (by their event's time).
    let since = chrono::Utc::now() + chrono::Duration::minutes(4);
    let filter = DeliveryFilter { since: Some(since), ..DeliveryFilter::default() };
    let rows = list_deliveries(&client, tenant, &filter, None, 10).await.unwrap();
    assert_eq!(rows.len(), 3, "+4.5, +6.5 and +7.5 minutes");
    let plan = relayops_shared::repo::delivery_queries::explain_list_deliveries(&client, tenant, &filter, None, 10)
        .await
        .unwrap();
    let read = scanned(&plan, "deliveries");
    let bound = since.timestamp_millis() - 60_000;
    let before: Vec<_> =
        all.iter().filter(|p| p.to_ms <= bound).map(|p| p.name.replace("events", "deliveries")).collect();
    assert!(!before.is_empty() && !read.is_empty(), "{all:?}");
    assert!(before.iter().all(|name| !read.contains(name)), "`since` prunes {before:?}: reads {read:?}\n{plan:#?}");
}

/// A soak with partitions of 4 s and a retention of 8 s, the publisher's own
/// maintenance every second: while events flow, windows are created and
/// dropped, storage stays flat, and every ingest succeeds, including those
/// that overlap a drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_soak_keeps_storage_flat_while_partitions_come_and_go_under_ingest() {
    let mut config = short_history(Duration::from_secs(4), Duration::from_secs(8));
    config.publisher.history.maintenance_interval = Duration::from_secs(1);
    let env = relayops_tests::TestEnv::start_with(config).await;
    env.create_endpoint("/sim/ok", &["*"], json!({})).await;

    let running = std::sync::atomic::AtomicBool::new(true);
    let sampler = async {
        let client = env.pool.get().await.unwrap();
        let (mut samples, mut seen, mut counts) = (Vec::new(), std::collections::BTreeSet::new(), Vec::new());
        while running.load(std::sync::atomic::Ordering::Relaxed) {
            let names: Vec<String> =
                partitions::list(&client, partitions::DELIVERIES).await.unwrap().into_iter().map(|p| p.name).collect();
            counts.push(names.len());
            seen.extend(names);
            samples.push((Instant::now(), partitions::storage_bytes(&client).await.unwrap()));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let left: std::collections::BTreeSet<String> =
            partitions::list(&client, partitions::DELIVERIES).await.unwrap().into_iter().map(|p| p.name).collect();
        (samples, seen.difference(&left).count(), counts)
    };
    let ingest = async {
        let started = Instant::now();
        let mut latencies = Vec::new();
        while started.elapsed() < Duration::from_secs(50) {
            let sent = Instant::now();
            let answer = env.post_event("soak.tick", json!({"at": started.elapsed().as_millis() as u64})).await;
            assert_eq!(answer.status, 201, "ingest keeps working: {answer:?}");
            latencies.push(sent.elapsed());
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        running.store(false, std::sync::atomic::Ordering::Relaxed);
        latencies
    };
    let ((samples, dropped, counts), mut latencies) = tokio::join!(sampler, ingest);

    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    let start = samples[0].0;
    let window = |from: u64, to: u64| {
        samples
            .iter()
            .filter(|(t, _)| (from..to).contains(&t.duration_since(start).as_secs()))
            .map(|(_, bytes)| *bytes)
            .max()
            .unwrap_or(0)
    };
    // Steady state: after the retention plus a window or two.
    let (middle, end) = (window(18, 34), window(34, 60));
    println!(
        "soak: {} events, ingest p50 {:?} p99 {:?} max {:?}; {dropped} delivery windows dropped; \
         partitions per table {:?}..{:?}; storage max {} KiB (18-34 s) vs {} KiB (34 s-end)",
        latencies.len(),
        at(0.5),
        at(0.99),
        latencies.last().unwrap(),
        counts.iter().min().unwrap(),
        counts.iter().max().unwrap(),
        middle / 1024,
        end / 1024
    );
    assert!(dropped >= 5, "windows were dropped while events flowed: {dropped}");
    assert!(*counts.iter().max().unwrap() <= 8, "partitions stay few: {counts:?}");
    assert!(end <= middle + middle / 2, "storage stays flat: {middle} then {end} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_whose_event_is_gone_is_taken_over() {
    let config = relayops_tests::TestConfig { run_worker: false, ..relayops_tests::TestConfig::default() };
    let env = relayops_tests::TestEnv::start_with(config).await;
    let key = "gone-event-key";
    let first = env.post_event_with_key("a.b", json!({ "n": 1 }), key).await.answer;
    assert_eq!(first.status, 201, "{:?}", first.body);
    let (first_id, first_uuid) = event_uuid(&first);
    let other_content = env.post_event_with_key("a.b", json!({ "n": 2 }), key).await.answer;
    other_content.expect_problem(409);

    // The event goes (as its partition would, past the retention); the key stays.
    let client = env.pool.get().await.unwrap();
    let deleted = client.execute("DELETE FROM relayops.events WHERE id = $1", &[&first_uuid]).await.unwrap();
    assert_eq!(deleted, 1);
    let keys = "SELECT count(*) FROM relayops.idempotency_keys WHERE idempotency_key = $1";
    assert_eq!(client.query_one(keys, &[&key]).await.unwrap().get::<_, i64>(0), 1);

    let again = env.post_event_with_key("a.b", json!({ "n": 2 }), key).await.answer;
    assert_eq!(again.status, 201, "a key naming no event is free for a new one: {:?}", again.body);
    let (again_id, again_uuid) = event_uuid(&again);
    assert_ne!(again_id, first_id);
    assert_eq!(env.count("events").await, 1);
    let held_by = "SELECT event_id FROM relayops.idempotency_keys WHERE idempotency_key = $1";
    assert_eq!(client.query_one(held_by, &[&key]).await.unwrap().get::<_, uuid::Uuid>(0), again_uuid);
}

/// The lease as a maintainer takes it (`partitions::maintain`): who holds
/// it and until when.
async fn lease_of(client: &tokio_postgres::Client) -> Option<(String, bool)> {
    let sql = "SELECT holder, expires_at > now() FROM relayops.maintenance_leases WHERE name = 'partitions'";
    client.query_opt(sql, &[]).await.unwrap().map(|row| (row.get(0), row.get(1)))
}

/// A scratch database migrated to now: its history has only the legacy
/// partitions, so a maintenance pass has partitions to create.
async fn migrated_scratch() -> ScratchDatabase {
    let db = ScratchDatabase::create().await;
    migrate::run(&mut db.pool.get().await.unwrap()).await.unwrap();
    db
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_partition_maintainer_skips_its_pass_while_the_first_holds_the_lease() {
    let db = migrated_scratch().await;
    let client = db.pool.get().await.unwrap();
    let history = HistoryConfig::default();
    // The first maintainer takes the lease, then waits for a lock this test
    // holds on the events table (creating a partition reads its definition).
    let locker = db.pool.get().await.unwrap();
    locker.batch_execute("BEGIN; LOCK TABLE ONLY relayops.events IN ACCESS EXCLUSIVE MODE").await.unwrap();
    let first_client = db.pool.get().await.unwrap();
    let first_config = history.clone();
    let first = tokio::spawn(async move { partitions::maintain(&first_client, &first_config).await.unwrap() });
    let first_holder = relayops_tests::eventually(relayops_tests::WAIT, || async {
        match lease_of(&client).await {
            Some((holder, true)) => Ok(holder),
            other => Err(format!("the first maintainer has not taken the lease yet: {other:?}")),
        }
    })
    .await;

    let second = partitions::maintain(&client, &history).await.unwrap();
    assert!(second.skipped, "{second:?}");
    assert!(second.created.is_empty() && second.dropped.is_empty(), "{second:?}");
    assert_eq!(lease_of(&client).await, Some((first_holder, true)), "the lease is still the first's");

    locker.batch_execute("ROLLBACK").await.unwrap();
    let first = first.await.unwrap();
    assert!(!first.skipped && !first.created.is_empty(), "{first:?}");
    assert_eq!(lease_of(&client).await.map(|(_, live)| live), Some(false), "returned at the end of the pass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_partition_maintenance_lease_is_taken_over() {
    let db = migrated_scratch().await;
    let client = db.pool.get().await.unwrap();
    let history = HistoryConfig::default();
    // A maintainer took the lease and died mid-pass.
    client
        .batch_execute(
            "INSERT INTO relayops.maintenance_leases (name, holder, expires_at)
             VALUES ('partitions', 'a-maintainer-that-died', now() + interval '5 minutes')",
        )
        .await
        .unwrap();
    let while_live = partitions::maintain(&client, &history).await.unwrap();
    assert!(while_live.skipped, "a live lease of another is respected: {while_live:?}");

    client
        .batch_execute("UPDATE relayops.maintenance_leases SET expires_at = now() - interval '1 second'")
        .await
        .unwrap();
    let after_expiry = partitions::maintain(&client, &history).await.unwrap();
    assert!(!after_expiry.skipped && !after_expiry.created.is_empty(), "{after_expiry:?}");
    let (holder, _) = lease_of(&client).await.unwrap();
    assert_ne!(holder, "a-maintainer-that-died", "the lease was taken over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_is_honoured_for_its_window_and_then_free_again() {
    // No publisher: its own maintenance would prune the keys this test ages.
    let config = relayops_tests::TestConfig { run_publisher: false, ..relayops_tests::TestConfig::default() };
    let env = relayops_tests::TestEnv::start_with(config).await;
    let url = format!("{}/v1/events", env.api_url);
    let send = |body: serde_json::Value| {
        env.http.post(&url).bearer_auth(&env.api_key).header("idempotency-key", "window-key").json(&body).send()
    };
    let first = send(json!({"event_type": "a.b", "payload": {"n": 1}})).await.unwrap();
    assert_eq!(first.status(), 201);
    let first: serde_json::Value = first.json().await.unwrap();
    let repeat: serde_json::Value =
        send(json!({"event_type": "a.b", "payload": {"n": 1}})).await.unwrap().json().await.unwrap();
    assert_eq!(repeat["id"], first["id"], "within the window, the same answer");

    // Seven days and a minute later, the key names nothing any more.
    let client = env.pool.get().await.unwrap();
    client
        .execute("UPDATE relayops.idempotency_keys SET created_at = now() - interval '7 days 1 minute'", &[])
        .await
        .unwrap();
    let later = send(json!({"event_type": "a.b", "payload": {"n": 2}})).await.unwrap();
    assert_eq!(later.status(), 201, "a key past its window is free for a new event");
    let later: serde_json::Value = later.json().await.unwrap();
    assert_ne!(later["id"], first["id"]);
    assert_eq!(env.count("events").await, 2);

    // Keys past the window are pruned; the fresh one stays.
    client.execute("UPDATE relayops.idempotency_keys SET created_at = now() - interval '8 days'", &[]).await.unwrap();
    let pruned = relayops_shared::repo::retention::prune_idempotency_keys(&client, 100).await.unwrap();
    assert_eq!(pruned, 1);
    assert_eq!(env.count("idempotency_keys").await, 0);
}

/// Two tenants, rows two days old and fresh ones; deliveries of the first
/// tenant's old rows: two delivered, one dead, one still pending.
const SEED_TENANTS: &str = "
INSERT INTO relayops.tenants (id, name, retention_days) VALUES ($1, 'short', 1), ($2, 'platform', NULL);
INSERT INTO relayops.webhook_endpoints (id, tenant_id, url, secret) VALUES
    ($3, $1, 'http://127.0.0.1:9/a', 'whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdA=='),
    ($4, $2, 'http://127.0.0.1:9/b', 'whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdA==');
CREATE TEMP TABLE seed AS
SELECT tenant, endpoint, status, at,
       (left(relayops.uuid_floor(at)::text, 13) || '-7' || substr(gen_random_uuid()::text, 16))::uuid AS event_id
FROM (VALUES ($1, $3, 'delivered', now() - interval '2 days'), ($1, $3, 'delivered', now() - interval '2 days'),
             ($1, $3, 'dead', now() - interval '2 days'), ($1, $3, 'pending', now() - interval '2 days'),
             ($1, $3, 'delivered', now()), ($2, $4, 'delivered', now() - interval '2 days'))
     AS v(tenant, endpoint, status, at);
INSERT INTO relayops.events (id, tenant_id, event_type, payload, request_hash, received_at)
SELECT event_id, tenant, 'a.b', '{}'::jsonb, sha256('x'::bytea), at FROM seed;
CREATE TEMP TABLE seeded AS
SELECT relayops.delivery_id_for(event_id) AS id, * FROM seed;
INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id, status, created_at)
SELECT id, tenant, event_id, endpoint, status, at FROM seeded;
INSERT INTO relayops.delivery_attempts (id, tenant_id, delivery_id, attempt_number, outcome, latency_ms, worker_id, started_at)
SELECT (left(relayops.uuid_floor(at + interval '1 second')::text, 13) || '-7' || substr(gen_random_uuid()::text, 16))::uuid,
       tenant, id, 1, CASE WHEN status = 'dead' THEN 'dead' ELSE 'delivered' END, 5, 'w', at
FROM seeded WHERE status <> 'pending';";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_a_shorter_retention_loses_its_old_finished_rows_in_batches() {
    use relayops_shared::repo::retention::sweep_tenants;
    let db = ScratchDatabase::create().await;
    let mut client = db.pool.get().await.unwrap();
    migrate::run(&mut client).await.unwrap();
    // Week-long windows: the one before now holds rows two days old.
    let history = HistoryConfig { partition: Duration::from_secs(7 * 86_400), ..HistoryConfig::default() };
    partitions::ensure(&client, &history).await.unwrap();
    let ids: Vec<uuid::Uuid> = (0..4).map(|_| uuid::Uuid::now_v7()).collect();
    let script = inline_params(SEED_TENANTS, &ids.iter().copied().map(uuid_literal).collect::<Vec<_>>());
    client.batch_execute(&script).await.unwrap();
    let count = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };

    // Bounded: a batch of 2 takes at most 2 deliveries (and their attempts).
    let first = sweep_tenants(&client, history.retention, 2).await.unwrap();
    assert!(first > 0);
    assert_eq!(count("SELECT count(*) FROM relayops.deliveries").await, 4, "two of three old finished ones went");
    while sweep_tenants(&client, history.retention, 2).await.unwrap() > 0 {}

    let left: Vec<(uuid::Uuid, String)> = client
        .query("SELECT tenant_id, status FROM relayops.deliveries ORDER BY tenant_id, status", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let mut expected = vec![
        (ids[0], "delivered".to_owned()), // fresh
        (ids[0], "pending".to_owned()),   // old but unfinished
        (ids[1], "delivered".to_owned()), // the platform's retention
    ];
    expected.sort();
    assert_eq!(left, expected);
    assert_eq!(count("SELECT count(*) FROM relayops.events").await, 3, "events go with their deliveries");
    assert_eq!(count("SELECT count(*) FROM relayops.delivery_attempts").await, 2, "and attempts");
}

/// The Lambda path: the scheduled publisher invocation runs the maintenance
/// too (here it finds windows missing ahead and creates them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduled_publisher_lambda_keeps_partitions_ahead() {
    use relayops_shared::config::PublisherBudgetConfig;
    use relayops_tests::lambda::{event_fixture, invoke_publisher};
    let mut config = short_history(Duration::from_secs(60), Duration::from_secs(3600));
    config.run_publisher = false;
    let mut env = relayops_tests::TestEnv::start_with(config).await;
    let client = env.pool.get().await.unwrap();
    let before = partitions::list(&client, partitions::EVENTS).await.unwrap();
    // The Lambda's configuration asks for more windows ahead than exist.
    env.config.publisher.history.ahead = 6;
    let publisher = env.lambda_publisher();
    let tick = invoke_publisher(
        &publisher,
        &PublisherBudgetConfig::default(),
        event_fixture("schedule.json"),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(tick.trigger, relayops_publisher::lambda::Trigger::Schedule);
    let after = partitions::list(&client, partitions::EVENTS).await.unwrap();
    assert!(after.len() >= before.len() + 4, "windows ahead were added: {before:?} then {after:?}");
    let ahead = after.last().unwrap().to_ms - partitions::uuid_millis(uuid::Uuid::now_v7());
    assert!(ahead > 6 * 60_000, "six windows ahead: {ahead} ms");
}

/// Whether `index` exists and is valid (usable by the planner).
async fn index_is_valid(client: &tokio_postgres::Client, index: &str) -> bool {
    let sql = "SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)), false)";
    client.query_one(sql, &[&index]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deliveries_partition_without_its_id_index_gets_it_on_a_later_pass_when_a_build_fails() {
    let db = migrated_scratch().await;
    let client = db.pool.get().await.unwrap();
    let history = HistoryConfig::default();
    partitions::maintain(&client, &history).await.unwrap();
    let now = partitions::now_millis();
    let current = partitions::list(&client, partitions::DELIVERIES)
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.from_ms.is_none_or(|from| from <= now) && now < p.to_ms)
        .expect("a deliveries partition for now")
        .name;
    let index = format!("relayops.{current}_id_unique");
    assert!(index_is_valid(&client, &index).await, "a new partition gets it before it is attached");
    // As a partition from before the index (an upgrade) is.
    client.batch_execute(&format!("DROP INDEX {index}")).await.unwrap();

    // The build cannot get its lock in time: the pass goes on without it.
    let blocker = db.pool.get().await.unwrap();
    blocker
        .batch_execute(&format!("BEGIN; LOCK TABLE relayops.{current} IN SHARE UPDATE EXCLUSIVE MODE"))
        .await
        .unwrap();
    client.batch_execute("SET lock_timeout = '200ms'").await.unwrap();
    let blocked = partitions::maintain(&client, &history).await;
    assert!(blocked.is_ok(), "a failed index build does not fail the pass: {blocked:?}");
    assert!(!index_is_valid(&client, &index).await, "not built while the partition was locked");

    // The next pass builds it.
    blocker.batch_execute("ROLLBACK").await.unwrap();
    client.batch_execute("RESET lock_timeout").await.unwrap();
    partitions::maintain(&client, &history).await.unwrap();
    assert!(index_is_valid(&client, &index).await, "built CONCURRENTLY by the next pass");
}
