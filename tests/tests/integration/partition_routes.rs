//! The worker's batch statements name the history partition their deliveries
//! live in: a claim and a record set up that one partition of `deliveries`
//! and of `events`, not every partition (Postgres 15 starts a generic plan on
//! a parent for all of them; with 30 days of history that cost a lone event's
//! claim more than its work), and a partition renamed under the worker's map
//! of partitions is still found, through the parent, and then by its new name.
use std::collections::BTreeSet;

use relayops_shared::db::Object;
use relayops_shared::repo::deliveries::Settled;
use relayops_shared::repo::delivery_batches::{
    claim_many, explain_claim_many, explain_record_many, record_many, DeliveryKey, Settlement,
};

use crate::batching::{claimed, delivered, pending_deliveries, routes, LEASE};

/// The names of the `deliveries` and `events` partitions in a plan: every
/// scan the executor set up, run or not.
fn partitions_in(node: &serde_json::Value, found: &mut BTreeSet<String>) {
    if let Some(relation) = node.get("Relation Name").and_then(serde_json::Value::as_str) {
        if relation.starts_with("deliveries") || relation.starts_with("events") {
            found.insert(relation.to_owned());
        }
    }
    for child in node.get("Plans").and_then(serde_json::Value::as_array).into_iter().flatten() {
        partitions_in(child, found);
    }
}

/// The partitions of `deliveries` and `events` holding `key`'s delivery and
/// its event.
async fn home_of(client: &Object, key: DeliveryKey) -> BTreeSet<String> {
    let row = client
        .query_one(
            "SELECT dc.relname::text, ec.relname::text
             FROM relayops.deliveries d
             JOIN pg_class dc ON dc.oid = d.tableoid
             JOIN relayops.events e ON e.id = d.event_id
             JOIN pg_class ec ON ec.oid = e.tableoid
             WHERE d.id = $1",
            &[&key.1.as_uuid()],
        )
        .await
        .unwrap();
    [row.get(0), row.get(1)].into_iter().collect()
}

async fn partition_count(client: &Object, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM pg_inherits WHERE inhparent = 'relayops.{table}'::regclass");
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_claim_and_record_set_up_only_the_partition_their_deliveries_live_in() {
    let (env, keys) = pending_deliveries(3).await;
    let mut client = env.pool.get().await.unwrap();
    for table in ["deliveries", "events"] {
        let count = partition_count(&client, table).await;
        assert!(count >= 3, "the test needs partitions besides the current one: {table} has {count}");
    }
    let home = home_of(&client, keys[0]).await;
    let routes = routes();

    let plan = explain_claim_many(&mut client, &routes, &keys, "worker-a", LEASE).await.unwrap();
    assert_eq!(plan[0]["Plan"]["Actual Rows"], keys.len(), "the explained claim took every key\n{plan:#}");
    let mut touched = BTreeSet::new();
    partitions_in(&plan[0]["Plan"], &mut touched);
    assert_eq!(touched, home, "the claim set up other partitions than its deliveries' own\n{plan:#}");

    let outcomes = claim_many(&client, &routes, &keys, "worker-a", LEASE).await.unwrap();
    assert!(outcomes.iter().all(claimed), "{outcomes:?}");
    let settlements: Vec<Settlement> = keys.iter().map(|key| delivered(*key, 1)).collect();
    let plan = explain_record_many(&mut client, &routes, &settlements, "worker-a").await.unwrap();
    assert_eq!(plan[0]["Plan"]["Actual Rows"], keys.len(), "the explained record took every key\n{plan:#}");
    let mut touched = BTreeSet::new();
    partitions_in(&plan[0]["Plan"], &mut touched);
    let deliveries_home: BTreeSet<String> =
        home.iter().filter(|name| name.starts_with("deliveries")).cloned().collect();
    assert_eq!(touched, deliveries_home, "the record set up other partitions than its deliveries' own\n{plan:#}");

    let settled = record_many(&client, &routes, &settlements, "worker-a").await.unwrap();
    assert!(settled.iter().all(|s| *s == Settled::Recorded), "{settled:?}");
    assert_eq!(env.count("delivery_attempts").await, keys.len() as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_renamed_under_a_workers_map_is_still_claimed_and_recorded() {
    let (env, keys) = pending_deliveries(2).await;
    let client = env.pool.get().await.unwrap();
    let routes = routes();
    let first = claim_many(&client, &routes, &keys[..1], "worker-a", LEASE).await.unwrap();
    assert!(claimed(&first[0]), "{first:?}");

    // The partition the map names is detached, renamed and attached again
    // (what a maintenance job might do): its name no longer exists.
    let home = home_of(&client, keys[1]).await;
    let partition = home.iter().find(|name| name.starts_with("deliveries")).unwrap().clone();
    let bound: String = client
        .query_one(
            "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c
             WHERE c.relname = $1 AND c.relnamespace = 'relayops'::regnamespace",
            &[&partition],
        )
        .await
        .unwrap()
        .get(0);
    client
        .batch_execute(&format!(
            "ALTER TABLE relayops.deliveries DETACH PARTITION relayops.{partition};
             ALTER TABLE relayops.{partition} RENAME TO {partition}_renamed;
             ALTER TABLE relayops.deliveries ATTACH PARTITION relayops.{partition}_renamed {bound};"
        ))
        .await
        .unwrap();

    let second = claim_many(&client, &routes, &keys[1..], "worker-a", LEASE).await.unwrap();
    assert!(claimed(&second[0]), "the delivery in the renamed partition was claimed: {second:?}");
    let settlements: Vec<Settlement> = keys.iter().map(|key| delivered(*key, 1)).collect();
    let settled = record_many(&client, &routes, &settlements, "worker-a").await.unwrap();
    assert_eq!(settled, [Settled::Recorded, Settled::Recorded], "both attempts recorded");
    let delivered_count: i64 = client
        .query_one("SELECT count(*) FROM relayops.deliveries WHERE status = 'delivered'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(delivered_count, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_across_two_partitions_is_claimed_and_recorded_whole_in_its_order() {
    let (env, keys) = pending_deliveries(2).await;
    let client = env.pool.get().await.unwrap();
    // A third pending delivery, a copy of the first, whose event is a day old:
    // it lives in another partition.
    let row = client
        .query_one(
            "WITH copy AS (SELECT relayops.delivery_id_for(relayops.uuid_floor(now() - interval '1 day')) AS event_id),
                  old_event AS (
                      INSERT INTO relayops.events
                          SELECT (jsonb_populate_record(e, jsonb_build_object('id', copy.event_id))).*
                          FROM relayops.events e, copy
                          WHERE e.id = (SELECT event_id FROM relayops.deliveries WHERE id = $1))
             INSERT INTO relayops.deliveries
                 SELECT (jsonb_populate_record(d, jsonb_build_object('id', relayops.delivery_id_for(copy.event_id),
                                                                    'event_id', copy.event_id))).*
                 FROM relayops.deliveries d, copy WHERE d.id = $1
             RETURNING id",
            &[&keys[0].1.as_uuid()],
        )
        .await
        .unwrap();
    let old = (env.tenant_id, relayops_shared::ids::DeliveryId::from_uuid(row.get(0)));
    assert_ne!(home_of(&client, old).await, home_of(&client, keys[0]).await, "the copy is in another partition");

    // The old one between the two new ones: each answer must stay in place.
    let batch = [keys[0], old, keys[1]];
    let routes = routes();
    let outcomes = claim_many(&client, &routes, &batch, "worker-a", LEASE).await.unwrap();
    assert!(outcomes.iter().all(claimed), "{outcomes:?}");
    let settlements = [delivered(batch[0], 1), delivered(batch[1], 2), delivered(batch[2], 3)];
    let settled = record_many(&client, &routes, &settlements, "worker-a").await.unwrap();
    assert_eq!(settled, [Settled::Recorded, Settled::Recorded, Settled::Recorded]);
    for (key, attempts) in batch.iter().zip([1, 2, 3]) {
        let count: i32 = client
            .query_one("SELECT attempt_count FROM relayops.deliveries WHERE id = $1", &[&key.1.as_uuid()])
            .await
            .unwrap()
            .get(0);
        assert_eq!(count, attempts, "each delivery got its own settlement");
    }
}
