//! The worker's hot statements for many deliveries at once: claim a batch of
//! deliveries (one statement), record a batch of attempts with each
//! delivery's next state (one statement), and give back a batch of deliveries
//! flow control deferred (one statement). Run through
//! [`Batcher`](crate::db::batcher::Batcher) so concurrent messages share a
//! commit; every item keeps the guarantees of the single-row versions in
//! [`deliveries`](super::deliveries): a claim takes only due rows, and only the
//! lease holder's attempt is recorded (attempt and state, both or neither).
//!
//! Rows are locked in id order, so two batches that overlap cannot deadlock,
//! and every row is found by key, so a batch costs O(batch) however large the
//! partitions are. Each statement names the history partition its batch lives
//! in ([`PartitionRoutes`]), so it also costs the same however many
//! partitions there are.
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::db::partition_routes::{bound_prepared_statements, Part, PartitionRoutes};
use crate::db::partitions::event_id_range;
use crate::db::DbError;
use crate::domain::DeliveryStatus;
use crate::ids::{AttemptId, DeliveryId, EndpointId, TenantId};
use crate::repo::circuits::{gives_up_at, parks};
use crate::repo::deliveries::{
    claimable, claimed_columns, heads_its_lane, in_its_partition, job_from_row, AttemptRecord, ClaimOutcome, Settled,
};
use crate::repo::sql;

/// A `locked` CTE: the deliveries named by `$source` (a CTE with `tenant_id`
/// and `id` columns) that meet `$condition`, each looked up on its own by id
/// in its partition (the id carries its event id's time:
/// `relayops.event_id_floor`) and locked, in id order, so two batches that
/// overlap cannot deadlock. The condition is checked again on the row as
/// locked (`FOR UPDATE` rechecks a row another transaction changed), so the
/// statement that follows may rely on it. `$low` and `$high` are the batch's
/// event id range ([`event_id_range`]): partitions the batch cannot touch are
/// pruned before the statement runs.
///
/// Every lookup in these statements is by key, whatever the statistics say
/// (a partition that is filling up has none until it is first analyzed): the
/// locking subquery is LATERAL (a subquery with `FOR UPDATE` is never
/// flattened into a join), each partition has a unique index on `id` alone
/// (`partitions::ensure_delivery_id_keys`), and the UPDATE that follows is
/// given nothing but the locked rows' keys to find its rows by. A version
/// that also gave it the status and the event id range let the planner pick
/// a scan of every pending row per batch (the BENCHMARKS.md of commit
/// `1e9a367`, "Claim queries stay O(batch)"). For the
/// same reason the tenant and `$condition` are tested outside the `OFFSET 0`
/// fence, on the row found by id: given `tenant_id = … AND status = …` next
/// to the id, the planner took the `(tenant_id, status, created_at, id)`
/// index on most connections of a bench run (every in-flight row of the
/// tenant read per record; commit `c45e285`), a plan that looks as
/// cheap as the id's own index while a partition is new. The UPDATEs that
/// follow match the locked rows by `(id, event_id)` alone: `locked` holds only
/// rows of the tenant named with each id.
macro_rules! locked_in_id_order {
    ($source:literal, $low:literal, $high:literal, $condition:expr) => {
        concat!(
            "locked AS MATERIALIZED (
         SELECT x.tenant_id, x.id, x.event_id, x.endpoint_id
         FROM (SELECT DISTINCT tenant_id, id FROM ",
            $source,
            " ORDER BY id) s
         CROSS JOIN LATERAL (
             SELECT d.tenant_id, d.id, d.event_id, d.endpoint_id
             FROM (SELECT d.* FROM relayops.deliveries d
                   WHERE d.id = s.id AND ",
            in_its_partition!("d.event_id", "s.id"),
            "
                     AND d.event_id BETWEEN ",
            $low,
            " AND ",
            $high,
            " OFFSET 0) d
             WHERE d.tenant_id = s.tenant_id AND ",
            $condition,
            "
             FOR UPDATE) x)"
        )
    };
}

/// Rows are found by key only (so the plan is O(batch) whatever the
/// statistics say about statuses), locked in id order if due (and, for an
/// ordered delivery, the head of its lane), and updated: leased, or `parked`
/// without a lease when the endpoint's circuit is open and the delivery is
/// not its probe (`repo::circuits`; the endpoint row is read here anyway).
/// Each delivery's event and endpoint are read by primary key (LATERAL with
/// `OFFSET 0`: never turned into a join over the whole table; the event's
/// and the endpoint's tenant are checked outside the fence, like the
/// delivery's — with the tenant beside the endpoint's id, plans made on small
/// tables sought the endpoint through `(tenant_id, created_at, id)`, reading
/// every endpoint of the tenant per delivery).
const CLAIM_MANY: &str = concat!(
    "WITH wanted AS (
         SELECT w.tenant_id, w.id FROM unnest($1::uuid[], $2::uuid[]) AS w(tenant_id, id)),
     ",
    locked_in_id_order!("wanted", "$5", "$6", concat!(claimable!(), " AND ", heads_its_lane!())),
    "
     UPDATE relayops.deliveries d
     SET status = CASE WHEN ",
    parks!(),
    " THEN 'parked' ELSE 'in_progress' END,
         lease_owner = CASE WHEN ",
    parks!(),
    " THEN NULL ELSE $3 END,
         lease_expires_at = CASE WHEN ",
    parks!(),
    " THEN NULL ELSE now() + $4::bigint * interval '1 millisecond' END,
         next_attempt_at = CASE WHEN ",
    parks!(),
    " THEN ",
    gives_up_at!(),
    " ELSE d.next_attempt_at END,
         updated_at = now()
     FROM locked l
     CROSS JOIN LATERAL (SELECT e.event_type, e.payload, e.tenant_id FROM relayops.events e
                         WHERE e.id = l.event_id OFFSET 0) e
     CROSS JOIN LATERAL (SELECT ep.* FROM relayops.webhook_endpoints ep
                         WHERE ep.id = l.endpoint_id OFFSET 0) ep
     WHERE d.id = l.id AND d.event_id = l.event_id AND e.tenant_id = l.tenant_id AND ep.tenant_id = l.tenant_id
     RETURNING d.tenant_id, d.id, d.status AS claimed_status, ",
    claimed_columns!()
);

const CURRENT_STATES: &str = concat!(
    "SELECT x.tenant_id, x.id, x.status, x.next_attempt_at
     FROM unnest($1::uuid[], $2::uuid[]) AS w(tenant_id, id)
     CROSS JOIN LATERAL (
         SELECT d.tenant_id, d.id, d.status, d.next_attempt_at FROM relayops.deliveries d
         WHERE d.id = w.id AND ",
    in_its_partition!("d.event_id", "w.id"),
    " OFFSET 0) x
     WHERE x.tenant_id = w.tenant_id"
);

const SETTLE_MANY_WITH_ATTEMPTS: &str = concat!(
    "WITH input AS (
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::int[], $5::timestamptz[], $6::int[],
                              $7::text[], $8::uuid[], $9::text[], $10::jsonb[], $11::text[], $12::int[],
                              $13::timestamptz[])
             AS i(tenant_id, id, status, attempt_number, next_attempt_at, http_status,
                  error, attempt_id, outcome, request_headers, response_body, latency_ms, started_at)),
",
    locked_in_id_order!("input", "$15", "$16", "d.status = 'in_progress' AND d.lease_owner = $14"),
    ",
     settled AS (
         UPDATE relayops.deliveries d
         SET status = i.status, attempt_count = i.attempt_number, next_attempt_at = i.next_attempt_at,
             lease_owner = NULL, lease_expires_at = NULL,
             last_http_status = i.http_status, last_error = i.error,
             delivered_at = CASE WHEN i.status = 'delivered' THEN now() ELSE d.delivered_at END,
             updated_at = now()
         FROM locked l JOIN input i ON i.tenant_id = l.tenant_id AND i.id = l.id
         WHERE d.id = l.id AND d.event_id = l.event_id
         RETURNING d.tenant_id, d.id)
     INSERT INTO relayops.delivery_attempts (id, tenant_id, delivery_id, attempt_number, outcome,
         http_status, error, request_headers, response_body, latency_ms, worker_id, started_at)
     SELECT i.attempt_id, i.tenant_id, i.id, i.attempt_number, i.outcome, i.http_status, i.error,
            i.request_headers, i.response_body, i.latency_ms, $14, i.started_at
     FROM input i JOIN settled s ON s.tenant_id = i.tenant_id AND s.id = i.id
     RETURNING tenant_id, delivery_id"
);

/// Gives claimed deliveries back without an attempt (flow control said not
/// now), each due again after its own wait, or parked to wait for a slot
/// (a negative wait: [`Deferral::until`]); `attempt_count` is untouched.
const DEFER_MANY: &str = concat!(
    "WITH input AS (
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[]) AS i(tenant_id, id, wait_ms)),
",
    locked_in_id_order!("input", "$5", "$6", "d.status = 'in_progress' AND d.lease_owner = $4"),
    "
     UPDATE relayops.deliveries d
     SET status = CASE WHEN i.wait_ms < 0 THEN 'parked' ELSE 'scheduled' END,
         next_attempt_at = CASE WHEN i.wait_ms >= 0 THEN now() + i.wait_ms * interval '1 millisecond' END,
         lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
     FROM locked l JOIN input i ON i.tenant_id = l.tenant_id AND i.id = l.id
     WHERE d.id = l.id AND d.event_id = l.event_id
     RETURNING d.tenant_id, d.id"
);

/// Parks due deliveries whose endpoint has no free slot (the worker's
/// memory says so) instead of claiming them: the claim's conditions, the
/// claim's write, no lease (`repo::waiting`). One that would have parked for
/// its open circuit gets its give-up time as the claim would write it.
const PARK_MANY: &str = concat!(
    "WITH wanted AS (
         SELECT w.tenant_id, w.id FROM unnest($1::uuid[], $2::uuid[]) AS w(tenant_id, id)),
     ",
    locked_in_id_order!("wanted", "$3", "$4", concat!(claimable!(), " AND ", heads_its_lane!())),
    "
     UPDATE relayops.deliveries d
     SET status = 'parked', lease_owner = NULL, lease_expires_at = NULL,
         next_attempt_at = CASE WHEN ",
    parks!(),
    " THEN ",
    gives_up_at!(),
    " END,
         updated_at = now()
     FROM locked l
     CROSS JOIN LATERAL (SELECT ep.* FROM relayops.webhook_endpoints ep
                         WHERE ep.id = l.endpoint_id OFFSET 0) ep
     WHERE d.id = l.id AND d.event_id = l.event_id AND ep.tenant_id = l.tenant_id AND ep.enabled
     RETURNING d.tenant_id, d.id"
);

/// Runs `template` once per history partition the batch's `ids` live in
/// (almost always one), named in the statement ([`PartitionRoutes`]):
/// `$run` is evaluated with `$statement` (`&str`) and `$items` (the positions
/// of that part of the batch) bound, and must give the part's rows. Ids no
/// partition can be named for, and a part whose partition was dropped
/// meanwhile, run `template` itself, on the parent tables. Gives the rows of
/// every part, together. (A macro, not a function taking an async closure:
/// the batchers' futures must be `Send`, which such a closure's are not
/// shown to be.)
macro_rules! on_each_partition {
    ($client:expr, $routes:expr, $ids:expr, $template:expr, |$statement:ident, $items:ident| $run:expr) => {{
        let (client, routes, template): (&deadpool_postgres::Client, &PartitionRoutes, &'static str) =
            ($client, $routes, $template);
        let mut rows: Vec<Row> = Vec::new();
        for part in routes.split(client, $ids).await? {
            let $items: &[usize] = &part.items;
            let routed = part.route.as_ref().map(|route| routes.statement(template, route));
            if routed.is_some() {
                bound_prepared_statements(client);
            }
            let mut result = {
                let $statement: &str = routed.as_deref().unwrap_or(template);
                $run.await
            };
            if routed.is_some() && result.as_ref().is_err_and(DbError::is_undefined_table) {
                routes.forget().await;
                let $statement: &str = template;
                result = $run.await;
            }
            rows.extend(result?);
        }
        rows
    }};
}

/// The items of `all` at `positions`: `all` itself when they are all of it
/// (a batch in one partition, nearly always), else a copy.
fn part_of<'a, T: Clone>(all: &'a [T], positions: &[usize]) -> Cow<'a, [T]> {
    if positions.len() == all.len() {
        Cow::Borrowed(all)
    } else {
        Cow::Owned(positions.iter().map(|&position| all[position].clone()).collect())
    }
}

/// A delivery named by a queue message.
pub type DeliveryKey = (TenantId, DeliveryId);

/// [`CLAIM_MANY`]'s parameters, in order.
struct ClaimParams<'a> {
    tenants: Vec<Uuid>,
    ids: Vec<Uuid>,
    worker_id: &'a str,
    lease_ms: i64,
    low: Uuid,
    high: Uuid,
}

impl<'a> ClaimParams<'a> {
    fn new(keys: &[DeliveryKey], worker_id: &'a str, lease: Duration) -> Self {
        let (tenants, ids) = key_columns(keys);
        let (low, high) = event_id_range(ids.iter().copied());
        Self { tenants, ids, worker_id, lease_ms: lease.as_millis() as i64, low, high }
    }

    fn as_sql(&self) -> [&(dyn ToSql + Sync); 6] {
        [&self.tenants, &self.ids, &self.worker_id, &self.lease_ms, &self.low, &self.high]
    }
}

/// Claims every due delivery among `keys` for `worker_id`; one outcome per key,
/// in order. A key named twice is claimed once (the second sees it leased).
/// The claim's commit does not wait for the WAL flush ([`sql::query_unflushed`]):
/// a claim lost in a database crash only means the delivery is claimed (and
/// sent) again, and the attempt record that follows it commits synchronously.
pub async fn claim_many(
    client: &deadpool_postgres::Client,
    routes: &PartitionRoutes,
    keys: &[DeliveryKey],
    worker_id: &str,
    lease: Duration,
) -> Result<Vec<ClaimOutcome>, DbError> {
    let ids: Vec<Uuid> = keys.iter().map(|(_, id)| id.as_uuid()).collect();
    let rows = on_each_partition!(client, routes, &ids, CLAIM_MANY, |statement, items| async {
        let params = ClaimParams::new(&part_of(keys, items), worker_id, lease);
        sql::query_unflushed(client, statement, &params.as_sql()).await
    });
    // Keyed by tenant and id: an id under the wrong tenant matches nothing.
    let mut claimed: HashMap<(Uuid, Uuid), _> = rows.iter().map(|row| (row_key(row), row)).collect();
    let missing: Vec<DeliveryKey> = keys.iter().filter(|key| !claimed.contains_key(&uuids(key))).copied().collect();
    let mut states = HashMap::new();
    if !missing.is_empty() {
        let (tenants, ids) = key_columns(&missing);
        for row in sql::query(client, CURRENT_STATES, &[&tenants, &ids]).await? {
            let status = DeliveryStatus::parse(row.get("status"));
            states.insert(row_key(&row), (status, row.get("next_attempt_at")));
        }
    }
    let mut outcomes = Vec::with_capacity(keys.len());
    let mut handed_out = HashSet::new();
    for key @ &(tenant, delivery) in keys {
        let outcome = match claimed.remove(&uuids(key)) {
            Some(row) if row.get::<_, &str>("claimed_status") == DeliveryStatus::Parked.as_str() => {
                ClaimOutcome::Parked { endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")) }
            }
            Some(row) => {
                handed_out.insert(uuids(key));
                ClaimOutcome::Claimed(Box::new(job_from_row(tenant, delivery, row)))
            }
            // Named twice in this batch: the first one holds the lease now.
            None if handed_out.contains(&uuids(key)) => {
                ClaimOutcome::NotClaimable { status: Some(DeliveryStatus::InProgress), next_attempt_at: None }
            }
            None => {
                let (status, next_attempt_at) = states.get(&uuids(key)).copied().unwrap_or((None, None));
                ClaimOutcome::NotClaimable { status, next_attempt_at }
            }
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// How the batch claim of `keys` runs, as `EXPLAIN (ANALYZE, FORMAT JSON)`
/// reports it — the plan the worker runs (its generic plan under
/// [`sql::BY_KEY_PLANS`]) — in a transaction that is rolled back (nothing is
/// claimed): so a test can check what a claim reads, not only what it returns.
pub async fn explain_claim_many(
    client: &mut deadpool_postgres::Object,
    routes: &PartitionRoutes,
    keys: &[DeliveryKey],
    worker_id: &str,
    lease: Duration,
) -> Result<serde_json::Value, DbError> {
    let ids: Vec<Uuid> = keys.iter().map(|(_, id)| id.as_uuid()).collect();
    let statement = statement_for(client, routes, &ids, CLAIM_MANY).await?;
    let params = ClaimParams::new(keys, worker_id, lease);
    let types = ["uuid[]", "uuid[]", "text", "bigint", "uuid", "uuid"];
    sql::explain_on_generic_plan(client, &statement, &types, &params.as_sql()).await
}

/// One attempt to record: which delivery, its number, and what happened.
#[derive(Debug, Clone)]
pub struct Settlement {
    pub tenant_id: TenantId,
    pub delivery_id: DeliveryId,
    pub attempt_number: i32,
    pub attempt: AttemptRecord,
}

/// [`SETTLE_MANY_WITH_ATTEMPTS`]'s parameters, in order: a column per field.
struct RecordParams<'a> {
    tenants: Vec<Uuid>,
    ids: Vec<Uuid>,
    statuses: Vec<&'a str>,
    numbers: Vec<i32>,
    next_at: Vec<Option<chrono::DateTime<chrono::Utc>>>,
    http_statuses: Vec<Option<i32>>,
    errors: Vec<Option<&'a str>>,
    attempt_ids: Vec<Uuid>,
    outcomes: Vec<&'a str>,
    headers: Vec<&'a serde_json::Value>,
    bodies: Vec<Option<&'a str>>,
    latencies: Vec<i32>,
    started: Vec<chrono::DateTime<chrono::Utc>>,
    worker_id: &'a str,
    low: Uuid,
    high: Uuid,
}

/// [`RecordParams`]'s Postgres types, in order.
const RECORD_TYPES: [&str; 16] = [
    "uuid[]",
    "uuid[]",
    "text[]",
    "int[]",
    "timestamptz[]",
    "int[]",
    "text[]",
    "uuid[]",
    "text[]",
    "jsonb[]",
    "text[]",
    "int[]",
    "timestamptz[]",
    "text",
    "uuid",
    "uuid",
];

impl<'a> RecordParams<'a> {
    fn new(settlements: &'a [Settlement], worker_id: &'a str) -> Self {
        let column = |f: &dyn Fn(&Settlement) -> Uuid| settlements.iter().map(f).collect::<Vec<_>>();
        let ids = column(&|s| s.delivery_id.as_uuid());
        let (low, high) = event_id_range(ids.iter().copied());
        Self {
            tenants: column(&|s| s.tenant_id.as_uuid()),
            ids,
            statuses: settlements.iter().map(|s| s.attempt.outcome.next_status().as_str()).collect(),
            numbers: settlements.iter().map(|s| s.attempt_number).collect(),
            next_at: settlements.iter().map(|s| s.attempt.next_attempt_at).collect(),
            http_statuses: settlements.iter().map(|s| s.attempt.http_status).collect(),
            errors: settlements.iter().map(|s| s.attempt.error.as_deref()).collect(),
            attempt_ids: column(&|_| AttemptId::new().as_uuid()),
            outcomes: settlements.iter().map(|s| s.attempt.outcome.as_str()).collect(),
            headers: settlements.iter().map(|s| &s.attempt.request_headers).collect(),
            bodies: settlements.iter().map(|s| s.attempt.response_body.as_deref()).collect(),
            latencies: settlements.iter().map(|s| s.attempt.latency_ms).collect(),
            started: settlements.iter().map(|s| s.attempt.started_at).collect(),
            worker_id,
            low,
            high,
        }
    }

    fn as_sql(&self) -> [&(dyn ToSql + Sync); 16] {
        [
            &self.tenants,
            &self.ids,
            &self.statuses,
            &self.numbers,
            &self.next_at,
            &self.http_statuses,
            &self.errors,
            &self.attempt_ids,
            &self.outcomes,
            &self.headers,
            &self.bodies,
            &self.latencies,
            &self.started,
            &self.worker_id,
            &self.low,
            &self.high,
        ]
    }
}

/// How the batch record of `settlements` runs — the plan the worker runs —
/// as `EXPLAIN (ANALYZE, FORMAT JSON)` reports it, rolled back (nothing is
/// recorded): like [`explain_claim_many`].
pub async fn explain_record_many(
    client: &mut deadpool_postgres::Object,
    routes: &PartitionRoutes,
    settlements: &[Settlement],
    worker_id: &str,
) -> Result<serde_json::Value, DbError> {
    let params = RecordParams::new(settlements, worker_id);
    let statement = statement_for(client, routes, &params.ids, SETTLE_MANY_WITH_ATTEMPTS).await?;
    sql::explain_on_generic_plan(client, &statement, &RECORD_TYPES, &params.as_sql()).await
}

/// Records every attempt whose delivery `worker_id` still leases, with the
/// delivery's next state; one result per settlement, in order. One statement
/// in a transaction of its own, on its generic plan
/// ([`sql::query_on_generic_plan`]).
pub async fn record_many(
    client: &deadpool_postgres::Client,
    routes: &PartitionRoutes,
    settlements: &[Settlement],
    worker_id: &str,
) -> Result<Vec<Settled>, DbError> {
    let keys: Vec<(Uuid, Uuid)> =
        settlements.iter().map(|s| (s.tenant_id.as_uuid(), s.delivery_id.as_uuid())).collect();
    let ids: Vec<Uuid> = keys.iter().map(|(_, id)| *id).collect();
    let rows = on_each_partition!(client, routes, &ids, SETTLE_MANY_WITH_ATTEMPTS, |statement, items| async {
        let part = part_of(settlements, items);
        let params = RecordParams::new(&part, worker_id);
        sql::query_on_generic_plan(client, statement, &params.as_sql()).await
    });
    let recorded: HashSet<(Uuid, Uuid)> =
        rows.iter().map(|row| (row.get("tenant_id"), row.get("delivery_id"))).collect();
    let settled = keys.iter().map(|key| recorded.contains(key));
    Ok(settled.map(|recorded| if recorded { Settled::Recorded } else { Settled::LeaseLost }).collect())
}

/// A claimed delivery to give back.
#[derive(Debug, Clone, Copy)]
pub struct Deferral {
    pub key: DeliveryKey,
    pub until: DeferUntil,
}

/// When a deferred delivery is due again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeferUntil {
    /// `scheduled`, due after this wait (a rate limit's refill).
    After(Duration),
    /// `parked` until a worker admits it (its endpoint had no free slot or
    /// no rate-limit token: `repo::waiting`).
    SlotFree,
}

impl DeferUntil {
    /// As [`DEFER_MANY`] takes it: the wait in ms, or -1 to park.
    fn wait_ms(self) -> i64 {
        match self {
            Self::After(wait) => wait.as_millis().min(i64::MAX as u128) as i64,
            Self::SlotFree => -1,
        }
    }
}

/// Defers every delivery `worker_id` still leases; one result per deferral,
/// in order (one statement on its generic plan, like [`record_many`]).
pub async fn defer_many(
    client: &deadpool_postgres::Client,
    routes: &PartitionRoutes,
    deferrals: &[Deferral],
    worker_id: &str,
) -> Result<Vec<Settled>, DbError> {
    let keys: Vec<DeliveryKey> = deferrals.iter().map(|deferral| deferral.key).collect();
    let all_ids: Vec<Uuid> = keys.iter().map(|(_, id)| id.as_uuid()).collect();
    let rows = on_each_partition!(client, routes, &all_ids, DEFER_MANY, |statement, items| async {
        let part = part_of(deferrals, items);
        let (tenants, ids): (Vec<Uuid>, Vec<Uuid>) = part.iter().map(|deferral| uuids(&deferral.key)).unzip();
        let waits: Vec<i64> = part.iter().map(|deferral| deferral.until.wait_ms()).collect();
        let (low, high) = event_id_range(ids.iter().copied());
        sql::query_on_generic_plan(client, statement, &[&tenants, &ids, &waits, &worker_id, &low, &high]).await
    });
    let deferred: HashSet<(Uuid, Uuid)> = rows.iter().map(row_key).collect();
    Ok(keys
        .iter()
        .map(|key| if deferred.contains(&uuids(key)) { Settled::Recorded } else { Settled::LeaseLost })
        .collect())
}

/// Parks every due delivery among `keys` for a slot of its endpoint
/// ([`PARK_MANY`]) instead of claiming it; one answer per key, in order:
/// `true` when it was parked (a row not due — leased, terminal, a retry not
/// yet due, behind its lane's head — is left as it was, for the claim to
/// decide).
pub async fn park_many(
    client: &deadpool_postgres::Client,
    routes: &PartitionRoutes,
    keys: &[DeliveryKey],
) -> Result<Vec<bool>, DbError> {
    let all_ids: Vec<Uuid> = keys.iter().map(|(_, id)| id.as_uuid()).collect();
    let rows = on_each_partition!(client, routes, &all_ids, PARK_MANY, |statement, items| async {
        let (tenants, ids) = key_columns(&part_of(keys, items));
        let (low, high) = event_id_range(ids.iter().copied());
        sql::query_on_generic_plan(client, statement, &[&tenants, &ids, &low, &high]).await
    });
    let parked: HashSet<(Uuid, Uuid)> = rows.iter().map(row_key).collect();
    Ok(keys.iter().map(|key| parked.contains(&uuids(key))).collect())
}

/// The statement [`on_each_partition!`] runs for a batch that lives in one
/// partition (`template` itself otherwise): for `EXPLAIN`.
async fn statement_for(
    client: &deadpool_postgres::Client,
    routes: &PartitionRoutes,
    ids: &[Uuid],
    template: &'static str,
) -> Result<std::sync::Arc<str>, DbError> {
    Ok(match routes.split(client, ids).await?.as_slice() {
        [Part { route: Some(route), .. }] => routes.statement(template, route),
        _ => template.into(),
    })
}

fn uuids(&(tenant, delivery): &DeliveryKey) -> (Uuid, Uuid) {
    (tenant.as_uuid(), delivery.as_uuid())
}

fn row_key(row: &tokio_postgres::Row) -> (Uuid, Uuid) {
    (row.get("tenant_id"), row.get("id"))
}

fn key_columns(keys: &[DeliveryKey]) -> (Vec<Uuid>, Vec<Uuid>) {
    keys.iter().map(uuids).unzip()
}
