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
