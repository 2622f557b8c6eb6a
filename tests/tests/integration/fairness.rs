//! Fair delivery between tenants (SPEC §12) with the production's ten
//! ready shards: a tenant's first attempts land only in its own two shards
//! or the two refuge shards;
//! a quiet tenant is delivered at once while another has a backlog to a slow
//! receiver (its own shards, and a reserve of the worker's slots the busy
//! tenant cannot take), even the one in 21 whose two shards are both the busy
//! tenant's (the refuge shards); retries come back to their tenant's shards;
//! and a worker killed while many tenants' deliveries wait in their shards
//! loses none of them. Inside one tenant, a slow
//! endpoint's backlog does not delay the tenant's other endpoints.
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use relayops_shared::broker::{QueueMessage, DEFAULT_READY_SHARDS};
use relayops_shared::ids::{DeliveryId, TenantId};
use relayops_tests::{eventually, TestConfig, TestEnv, WAIT};
use serde_json::{json, Value};

fn sharded() -> TestConfig {
    TestConfig { ready_shards: DEFAULT_READY_SHARDS, ..Default::default() }
}

/// The two shards a tenant's first attempts may go to.
fn shards_of(env: &TestEnv, tenant: TenantId) -> HashSet<usize> {
    let (first, second) = env.topology().ready_shards.candidates(tenant);
    HashSet::from([first, second])
}

/// Another tenant whose two shards are not both the env tenant's (one
/// chance in 21 that they are: then it would share the busy tenant's queues,
/// the case shuffle sharding makes rare, not impossible).
async fn tenant_beside(env: &TestEnv) -> (TenantId, String) {
    let busy = shards_of(env, env.tenant_id);
    loop {
        let (tenant, key) = env.second_tenant().await;
        if shards_of(env, tenant) != busy {
            return (tenant, key);
        }
    }
}

/// Creates an endpoint for the tenant with `key` at a simulator path.
async fn endpoint_for(env: &TestEnv, key: &str, path: &str, event_types: &[&str], extra: Value) -> String {
    let mut body = json!({ "url": format!("{}{path}", env.simulator_url), "event_types": event_types });
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let answer = env.request(reqwest::Method::POST, "/v1/endpoints", Some(key), Some(body)).await;
    assert_eq!(answer.status, 201, "{:?}", answer.body);
    env.simulator.register_secret(answer.body["secret"].as_str().unwrap()).unwrap();
    answer.body["id"].as_str().unwrap().to_owned()
}

/// Posts `count` events of `event_type` for the env tenant, in batches of 500.
async fn post_many(env: &TestEnv, event_type: &str, count: usize) {
    for start in (0..count).step_by(500) {
        let events: Vec<Value> = (start..(start + 500).min(count))
            .map(|n| json!({ "event_type": event_type, "payload": { "n": n } }))
            .collect();
        let answer = env.post("/v1/events/batch", json!({ "events": events })).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }
}

/// Five `quiet.ping` events posted one after another by the tenant with
/// `key`, each waited for at `/sim/ok` (up to `limit`): how long each took,
/// post to arrival.
async fn quiet_pings(env: &TestEnv, key: &str, limit: Duration) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for n in 0..5 {
        let started = Instant::now();
        let body = json!({ "event_type": "quiet.ping", "payload": { "n": n } });
        let answer = env.request(reqwest::Method::POST, "/v1/events", Some(key), Some(body)).await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
        env.simulator.wait_until(limit, |received| received.iter().filter(|r| r.path == "/sim/ok").count() > n).await;
        latencies.push(started.elapsed());
    }
    latencies
}

async fn queue_depths(env: &TestEnv) -> Vec<u32> {
    let mut depths = Vec::new();
    for shard in env.topology().ready_shards.all() {
        depths.push(env.queue_depth(&shard.queue).await);
    }
    depths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_first_attempts_go_only_to_its_own_two_shards_or_the_refuge() {
    let env = TestEnv::start_with(TestConfig { run_worker: false, ..sharded() }).await;
    env.create_endpoint("/sim/ok", &["a.b"], json!({})).await;
    let (other, other_key) = tenant_beside(&env).await;
    endpoint_for(&env, &other_key, "/sim/ok", &["a.b"], json!({})).await;
    post_many(&env, "a.b", 300).await;
    for n in 0..20 {
        let body = json!({ "event_type": "a.b", "payload": { "n": n } });
        assert_eq!(env.request(reqwest::Method::POST, "/v1/events", Some(&other_key), Some(body)).await.status, 201);
    }
    let depths = eventually(WAIT, || async {
        let published = env.count("outbox_messages").await == 0;
        let depths = queue_depths(&env).await;
        if published && depths.iter().sum::<u32>() > 0 {
            Ok(depths)
        } else {
            Err(format!("outbox not published yet; depths {depths:?}"))
        }
    })
    .await;
    let used: HashSet<usize> = (0..depths.len()).filter(|index| depths[*index] > 0).collect();
    let mut allowed: HashSet<usize> = shards_of(&env, env.tenant_id).union(&shards_of(&env, other)).copied().collect();
    allowed.extend(env.topology().ready_shards.refuge());
    assert!(
        used.is_subset(&allowed),
        "messages only in the tenants' or the refuge shards: {depths:?}, allowed {allowed:?}"
    );
    assert_eq!(depths[0], 0, "first attempts never go to the returns queue: {depths:?}");
    assert!(used.len() >= 2, "both tenants' messages are queued: {depths:?}");
}

/// Retries come back to their own tenant's shards — the one each message
/// arrived by — never to one queue every tenant's retries share, so a loud
/// tenant's returning retries cannot queue in front of a quiet tenant's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_retries_come_back_to_its_own_shards_not_a_shared_queue() {
    let mut env = TestEnv::start_with(sharded()).await;
    // A wait of 20 s goes through the 5 s delay queue and comes back early
    // (to be sent round again): with the worker gone, it waits in its shard.
    let policy = json!({ "retry_schedule_secs": [20], "max_in_flight": 1000 });
    env.create_endpoint("/sim/status/503", &["loud.fail"], policy.clone()).await;
    let (quiet, quiet_key) = tenant_beside(&env).await;
    endpoint_for(&env, &quiet_key, "/sim/status/503", &["quiet.fail"], policy).await;
    // Fewer than the 20 failures in a row that open an endpoint's circuit
    // (its deliveries would then wait parked, not scheduled).
    post_many(&env, "loud.fail", 15).await;
    let body = json!({ "event_type": "quiet.fail", "payload": {} });
    assert_eq!(env.request(reqwest::Method::POST, "/v1/events", Some(&quiet_key), Some(body)).await.status, 201);
    eventually(WAIT, || async {
        match env.query_i64("SELECT count(*) FROM relayops.deliveries WHERE status = 'scheduled'").await {
            16 => Ok(()),
            scheduled => Err(format!("{scheduled} of 16 deliveries failed once so far")),
        }
    })
    .await;
    env.kill_worker().await;
    // Every delivery's message comes back to a ready queue (each taken as
    // it arrives; a few may come twice, sent round as the worker died).
    let shards = env.topology().ready_shards.all().to_vec();
    let refuge = env.topology().ready_shards.refuge();
    let back = std::sync::Mutex::new(HashMap::<DeliveryId, (TenantId, usize)>::new());
    eventually(WAIT, || async {
        for (index, shard) in shards.iter().enumerate() {
            for message in env.take_messages(&shard.queue).await {
                let message: QueueMessage = serde_json::from_value(message).expect("a queue message");
                for task in message.tasks() {
                    back.lock().unwrap().insert(task.delivery_id, (task.tenant_id, index));
                }
            }
        }
        match back.lock().unwrap().len() {
            16 => Ok(()),
            seen => Err(format!("{seen} of 16 deliveries' messages back in a ready queue")),
        }
    })
    .await;
    let back = back.into_inner().unwrap();
    for (delivery, (tenant, index)) in &back {
        assert!(
            *index > 0 && (shards_of(&env, *tenant).contains(index) || refuge.contains(index)),
            "{delivery} (tenant {tenant}) came back to {}, not its tenant's own shard or a refuge",
            shards[*index].queue
        );
    }
    assert_eq!(back.values().filter(|(tenant, _)| *tenant == quiet).count(), 1, "the quiet tenant's one retry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_tenant_is_delivered_at_once_while_another_has_a_backlog_to_a_slow_receiver() {
    let env = TestEnv::start_with(sharded()).await;
    // The busy tenant: 1,000 deliveries to a receiver that takes a second
    // each, allowed as many requests at once as the worker has slots (16):
    // over a minute of work for the worker whatever happens.
    env.create_endpoint("/sim/slow/1000", &["busy.flood"], json!({ "max_in_flight": 1000 })).await;
    let (_, quiet_key) = tenant_beside(&env).await;
    endpoint_for(&env, &quiet_key, "/sim/ok", &["quiet.ping"], json!({})).await;
    post_many(&env, "busy.flood", 1000).await;
    // The backlog is under way: the slow receiver holds many requests.
    eventually(WAIT, || async {
        let open = env.simulator.max_in_flight("/sim/slow/1000");
        if open >= 8 {
            Ok(())
        } else {
            Err(format!("{open} requests in flight at the slow receiver"))
        }
    })
    .await;

    let latencies = quiet_pings(&env, &quiet_key, Duration::from_secs(30)).await;
    let busy_tenant = env.tenant_id.as_uuid();
    let backlog = env
        .query_i64(&format!(
            "SELECT count(*) FROM relayops.deliveries WHERE status <> 'delivered' AND tenant_id = '{busy_tenant}'"
        ))
        .await;
    assert!(
        backlog >= 500,
        "the busy tenant still had a backlog ({backlog} undelivered) while the quiet one was served"
    );
    // Behind the backlog it would be over a minute; a busy CI machine gets
    // generous room above the ~10 ms it takes on a quiet one.
    let slowest = latencies.iter().max().unwrap();
    assert!(*slowest < Duration::from_secs(5), "the quiet tenant's deliveries took {latencies:?}");
    let received = env.simulator.received();
    let quiet: Vec<_> = received.iter().filter(|r| r.path == "/sim/ok").collect();
    assert!(quiet.iter().all(|r| r.signature_valid == Some(true)));
}

/// A tenant whose two own shards are both the env tenant's: cornered, were
/// it not for the refuge shards. Tenants are made straight in the database
/// (cheap) until one has the same two shards (one chance in 21 each).
async fn cornered_tenant(env: &TestEnv) -> (TenantId, String) {
    use relayops_shared::auth::{ApiKeySecret, Scope};
    use relayops_shared::repo::{api_keys, tenants};
    let busy = shards_of(env, env.tenant_id);
    let client = env.pool.get().await.unwrap();
    loop {
        let tenant = tenants::insert_tenant(&client, "cornered").await.unwrap();
        if shards_of(env, tenant) == busy {
            let secret = ApiKeySecret::generate();
            let key =
                api_keys::NewApiKey { name: "cornered", secret: &secret, scopes: &[Scope::Admin], created_by: None };
            api_keys::insert_api_key(&client, tenant, &key).await.unwrap();
            return (tenant, secret.expose().to_owned());
        }
    }
}

/// The worker starts only once the busy tenant's backlog and the cornered
/// tenant's pings are queued, so where each waits is plain: the pings in a
/// refuge shard, none behind the backlog in the two shards both tenants
/// share. (With the worker running, a slow receiver's backlog beyond its
/// tenant's share would be parked, not queued: `a_tenants_fast_endpoint…`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_tenant_whose_two_shards_are_a_busy_tenants_takes_refuge_and_is_delivered_at_once() {
    let mut env = TestEnv::start_with(TestConfig { run_worker: false, ..sharded() }).await;
    // 3,000 deliveries to a receiver that takes 5 s each: minutes of work
    // at the worker's 16 slots, and not known slow before the pings are due.
    env.create_endpoint("/sim/slow/5000", &["busy.flood"], json!({ "max_in_flight": 1000 })).await;
    let (_, quiet_key) = cornered_tenant(&env).await;
    endpoint_for(&env, &quiet_key, "/sim/ok", &["quiet.ping"], json!({})).await;
    post_many(&env, "busy.flood", 3000).await;
    let own = shards_of(&env, env.tenant_id);
    let queued_in_own = |depths: &[u32]| own.iter().map(|shard| depths[*shard]).sum::<u32>();
    // The outbox read empty first: every message was confirmed, so queued,
    // before the depths are read.
    let backlog = eventually(WAIT, || async {
        let published = env.count("outbox_messages").await == 0;
        let depths = queue_depths(&env).await;
        if published && queued_in_own(&depths) >= 20 {
            Ok(depths)
        } else {
            Err(format!("the backlog is not queued yet: depths {depths:?}"))
        }
    })
    .await;
    let refuge = env.topology().ready_shards.refuge();
    assert_eq!(refuge.len(), 2, "the default shards have a refuge");
    let in_refuge = |depths: &[u32]| refuge.clone().map(|shard| depths[shard]).sum::<u32>();
    // At most the few messages the busy tenant sent before it was judged to
    // have a backlog (the workers' windows take those at once).
    assert!(in_refuge(&backlog) <= 8, "no backlog in the refuge shards: {backlog:?}");

    for n in 0..5 {
        let body = json!({ "event_type": "quiet.ping", "payload": { "n": n } });
        let answer = env.request(reqwest::Method::POST, "/v1/events", Some(&quiet_key), Some(body)).await;
        assert_eq!(answer.status, 201, "{:?}", answer.body);
    }
    let depths = eventually(WAIT, || async {
        let published = env.count("outbox_messages").await == 0;
        let depths = queue_depths(&env).await;
        if published && in_refuge(&depths) > in_refuge(&backlog) {
            Ok(depths)
        } else {
            Err(format!("the pings are not queued yet: depths {depths:?}"))
        }
    })
    .await;
    assert_eq!(
        queued_in_own(&depths),
        queued_in_own(&backlog),
        "no ping queued behind the backlog in the shards it shares: {backlog:?} then {depths:?}"
    );

    env.start_worker().await;
    let started = Instant::now();
    env.simulator
        .wait_until(Duration::from_secs(60), |received| received.iter().filter(|r| r.path == "/sim/ok").count() >= 5)
        .await;
    let took = started.elapsed();
    let still_queued = queued_in_own(&queue_depths(&env).await);
    assert!(still_queued > 0, "the busy tenant's shards still held its backlog while the quiet one was served");
    // Behind the backlog it would be minutes; a busy CI machine gets
    // generous room above the ~10 ms it takes on a quiet one.
    assert!(took < Duration::from_secs(5), "the cornered tenant's five pings took {took:?} once the worker ran");
}

/// Inside one tenant (SPEC §12): its slow endpoint, allowed 1,000 requests
/// at once, may hold most of the tenant's share of the worker's 64 slots
/// (57 of 60); what it has beyond that is parked, not queued in the tenant's
/// shards in front of its other endpoints, so the tenant's own pings to a
/// fast endpoint go at once. Parked, the backlog is still all delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_fast_endpoint_is_delivered_at_once_beside_its_own_slow_endpoints_backlog() {
    const SLOW: &str = "/sim/slow/600";
    let mut config = sharded();
    config.worker.concurrency = 64;
    let env = TestEnv::start_with(config).await;
    // 4,000 deliveries to a receiver that takes 600 ms each (slow: over
    // `SLOW_HOLD`): at the endpoint's share of 57 slots, 42 s of work, and
    // twice what the worker's windows hold (64 messages of up to 32).
    env.create_endpoint(SLOW, &["busy.flood"], json!({ "max_in_flight": 1000 })).await;
    env.create_endpoint("/sim/ok", &["quiet.ping"], json!({})).await;
    post_many(&env, "busy.flood", 4000).await;
    eventually(WAIT, || async {
        let open = env.simulator.max_in_flight(SLOW);
        if open >= 32 {
            Ok(())
        } else {
            Err(format!("{open} requests in flight at the slow receiver"))
        }
    })
    .await;

    let latencies = quiet_pings(&env, &env.api_key, Duration::from_secs(60)).await;
    let backlog = env.query_i64("SELECT count(*) FROM relayops.deliveries WHERE status <> 'delivered'").await;
    assert!(backlog >= 2000, "the slow endpoint still had a backlog ({backlog} undelivered) while the pings went");
    // Behind the backlog in the tenant's shards it would be 15 s or more; a
    // busy CI machine gets generous room above the ~10 ms it takes on a
    // quiet one.
    let slowest = latencies.iter().max().unwrap();
    assert!(*slowest < Duration::from_secs(5), "the fast endpoint's deliveries took {latencies:?}");
    // Parked, the backlog still goes, as fast as its share allows.
    eventually(Duration::from_secs(240), || async {
        let delivered = env.query_i64("SELECT count(*) FROM relayops.deliveries WHERE status = 'delivered'").await;
        if delivered == 4005 {
            Ok(())
        } else {
            Err(format!("{delivered} of 4,005 delivered"))
        }
    })
    .await;
    let most = env.simulator.max_in_flight(SLOW);
    assert!((48..=57).contains(&most), "the slow endpoint had about its share of 57 slots: {most} at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_many_tenants_deliveries_wait_in_their_shards_loses_none() {
    let mut config = TestConfig { run_worker: false, ..sharded() };
    config.worker.request_timeout = Duration::from_secs(5);
    config.worker.lease = Duration::from_secs(6);
    let env = TestEnv::start_with(config).await;
    // Six tenants, 40 events each, to a receiver that answers in 300 ms.
    let mut keys = vec![env.api_key.clone()];
    env.create_endpoint("/sim/slow/300", &["a.b"], json!({ "max_in_flight": 50 })).await;
    for _ in 0..5 {
        let (_, key) = env.second_tenant().await;
        endpoint_for(&env, &key, "/sim/slow/300", &["a.b"], json!({ "max_in_flight": 50 })).await;
        keys.push(key);
    }
    for key in &keys {
        let events: Vec<Value> = (0..40).map(|n| json!({ "event_type": "a.b", "payload": { "n": n } })).collect();
        let body = json!({ "events": events });
        let answer = env.request(reqwest::Method::POST, "/v1/events/batch", Some(key), Some(body)).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }
    let mut doomed = env.spawn_role("worker", &[]);
    env.simulator.wait_until(WAIT, |received| received.len() >= 20).await;
    doomed.kill();

    let _survivor = env.spawn_role("worker", &[]);
    env.wait_for_sql(
        "every delivery delivered",
        "SELECT count(*) = 240 FROM relayops.deliveries WHERE status = 'delivered'",
    )
    .await;
    let received = env.simulator.received();
    let distinct: HashSet<_> = received.iter().filter_map(|r| r.delivery_id.clone()).collect();
    assert_eq!(distinct.len(), 240, "every delivery reached the receiver");
    assert!(received.iter().all(|r| r.signature_valid == Some(true)));
    let depths = queue_depths(&env).await;
    assert!(depths.iter().all(|depth| *depth == 0), "nothing left in any shard: {depths:?}");
}

/// Another tenant whose two shards are both other than the env tenant's:
/// neither's waiting messages take the other's prefetch.
async fn tenant_apart(env: &TestEnv) -> (TenantId, String) {
    let busy = shards_of(env, env.tenant_id);
    loop {
        let (tenant, key) = env.second_tenant().await;
        if shards_of(env, tenant).is_disjoint(&busy) {
            return (tenant, key);
        }
    }
}

/// Deliveries the simulator answered on `path`.
fn answered(env: &TestEnv, path: &str) -> usize {
    env.simulator.received().iter().filter(|r| r.path == path && r.answered_status == 200).count()
}

/// Weights (SPEC §12): the platform operator gives a tenant weight 2 (the
/// admin API checks it); while it and a weight-1 tenant both have a backlog
/// to slow receivers, the worker's slots are shared 2:1 and so are the
/// deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_2_tenant_is_delivered_twice_as_fast_as_a_weight_1_tenant_while_both_wait() {
    const HEAVY: &str = "/sim/slow/200";
    const LIGHT: &str = "/sim/slow/201";
    let mut config = TestConfig { run_worker: false, ..sharded() };
    config.worker.concurrency = 12;
    let mut env = TestEnv::start_with(config).await;
    let admin = Some(env.config.admin_token.clone());
    let path = format!("/admin/v1/tenants/{}/weight", env.tenant_id);
    for bad in [json!({ "weight": 0 }), json!({ "weight": 101 }), json!({ "weight": "2" }), json!({})] {
        let refused = env.request(reqwest::Method::PUT, &path, admin.as_deref(), Some(bad.clone())).await;
        refused.expect_problem(422);
    }
    let set = env.request(reqwest::Method::PUT, &path, admin.as_deref(), Some(json!({ "weight": 2 }))).await;
    assert_eq!((set.status, &set.body["weight"]), (200, &json!(2)), "{:?}", set.body);

    env.create_endpoint(HEAVY, &["heavy.x"], json!({ "max_in_flight": 100 })).await;
    let (_, light_key) = tenant_apart(&env).await;
    endpoint_for(&env, &light_key, LIGHT, &["light.x"], json!({ "max_in_flight": 100 })).await;
    post_many(&env, "heavy.x", 300).await;
    let events: Vec<Value> = (0..300).map(|n| json!({ "event_type": "light.x", "payload": { "n": n } })).collect();
    let light_batch = env
        .request(reqwest::Method::POST, "/v1/events/batch", Some(&light_key), Some(json!({ "events": events })))
        .await;
    assert_eq!(light_batch.status, 200, "{:?}", light_batch.body);
    // Both backlogs are queued before the worker takes its first slot.
    env.start_worker().await;

    // Past the start, both still waiting: count each tenant's deliveries
    // while the weight-2 tenant receives 120 more.
    let at = |heavy: usize, light: usize| {
        let env = &env;
        move || async move {
            let (h, l) = (answered(env, HEAVY), answered(env, LIGHT));
            if h >= heavy && l >= light {
                Ok((h, l))
            } else {
                Err(format!("{h} heavy and {l} light deliveries so far"))
            }
        }
    };
    let (heavy_before, light_before) = eventually(WAIT, at(30, 15)).await;
    let (heavy_after, light_after) = eventually(WAIT, at(heavy_before + 120, 0)).await;
    let (heavy, light) = (heavy_after - heavy_before, light_after - light_before);
    let ratio = heavy as f64 / light.max(1) as f64;
    println!("while both waited: weight 2 got {heavy} deliveries, weight 1 got {light} ({ratio:.2}×)");
    assert!(light_after < 300, "the weight-1 tenant still had a backlog ({light_after} of 300 delivered)");
    assert!((1.8..=2.2).contains(&ratio), "weight 2 got {ratio:.2}× the weight-1 tenant's deliveries");
}
