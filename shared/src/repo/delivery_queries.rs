//! Operators' reads of deliveries: filtered keyset pages (newest first, by
//! `(created_at, id)`, which never change once a row exists, so a walk through
//! the pages sees every row that existed when it began exactly once, however
//! many rows are inserted meanwhile) and counts by status for an endpoint.
//!
//! Only the filters a caller set become SQL conditions, so every combination
//! gets a plan that can use its index (`deliveries_tenant_created_idx`,
//! `deliveries_endpoint_created_idx`, and the status indexes).
use crate::repo::GenericClient;
use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::db::partitions::{id_lower_bound, id_upper_bound};
use crate::db::DbError;
use crate::domain::{DeliveryStatus, EventType, OrderingKey};
use crate::ids::{EndpointId, TenantId};
use crate::repo::deliveries::{DeliveryRecord, DELIVERY_COLUMNS};
use crate::repo::sql;

/// A position in a newest-first list: the last row of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeKey {
    pub at: DateTime<Utc>,
    pub id: Uuid,
}

/// Filters for operator lists of deliveries; `None` means "any".
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub status: Option<DeliveryStatus>,
    pub endpoint: Option<EndpointId>,
    pub event_type: Option<EventType>,
    /// Of events posted with this ordering key.
    pub ordering_key: Option<OrderingKey>,
    /// Created at or after.
    pub since: Option<DateTime<Utc>>,
    /// Created before.
    pub until: Option<DateTime<Utc>>,
}

/// A `WHERE` clause under construction: conditions and their parameters.
pub(crate) struct Conditions {
    sql: Vec<String>,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Conditions {
    pub(crate) fn new() -> Self {
        Self { sql: Vec::new(), params: Vec::new() }
    }

    /// Adds a condition; `{}` in it stands for the parameter's placeholder.
    pub(crate) fn push(&mut self, condition: &str, value: impl ToSql + Sync + Send + 'static) {
        self.params.push(Box::new(value));
        self.sql.push(condition.replace("{}", &format!("${}", self.params.len())));
    }

    /// A keyset condition on two columns: `(time, id) < (key.at, key.id)`.
    pub(crate) fn push_before(&mut self, time_column: &str, id_column: &str, key: TimeKey) {
        self.params.push(Box::new(key.at));
        self.params.push(Box::new(key.id));
        let (at, id) = (self.params.len() - 1, self.params.len());
        self.sql.push(format!("({time_column}, {id_column}) < (${at}, ${id})"));
    }

    /// Bounds a partition key (a UUIDv7 column) by the times the other
    /// conditions allow, widened by the clock slack: rows at or after `since`
    /// and before `before`. Redundant with those conditions; it is what lets
    /// Postgres skip the partitions outside them.
    pub(crate) fn push_partition_window(
        &mut self,
        key_column: &str,
        since: Option<DateTime<Utc>>,
        before: Option<DateTime<Utc>>,
    ) {
        if let Some(since) = since {
            self.push(&format!("{key_column} >= {{}}"), id_lower_bound(since));
        }
        if let Some(before) = before {
            self.push(&format!("{key_column} < {{}}"), id_upper_bound(before));
        }
    }

    /// The next placeholder, for a trailing `LIMIT`.
    pub(crate) fn push_param(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(value));
        format!("${}", self.params.len())
    }

    pub(crate) fn where_clause(&self) -> String {
        self.sql.join(" AND ")
    }

    pub(crate) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params.iter().map(|param| param.as_ref() as &(dyn ToSql + Sync)).collect()
    }
}

fn filtered(tenant: TenantId, filter: &DeliveryFilter) -> Conditions {
    let mut conditions = Conditions::new();
    conditions.push("d.tenant_id = {}", tenant.as_uuid());
    if let Some(status) = filter.status {
        conditions.push("d.status = {}", status.as_str());
    }
    if let Some(endpoint) = filter.endpoint {
        conditions.push("d.endpoint_id = {}", endpoint.as_uuid());
    }
    if let Some(event_type) = &filter.event_type {
        conditions.push(
            "EXISTS (SELECT 1 FROM relayops.events e
                     WHERE e.tenant_id = d.tenant_id AND e.id = d.event_id AND e.event_type = {})",
            event_type.as_str().to_owned(),
        );
    }
    if let Some(ordering_key) = &filter.ordering_key {
        conditions.push("d.ordering_key = {}", ordering_key.as_str().to_owned());
    }
    if let Some(since) = filter.since {
        conditions.push("d.created_at >= {}", since);
    }
    if let Some(until) = filter.until {
        conditions.push("d.created_at < {}", until);
    }
    conditions.push_partition_window("d.event_id", filter.since, filter.until);
    conditions
}

/// Up to `limit` deliveries after `after`, newest first, within the tenant.
pub async fn list_deliveries(
    client: &impl GenericClient,
    tenant: TenantId,
    filter: &DeliveryFilter,
    after: Option<TimeKey>,
    limit: i64,
) -> Result<Vec<DeliveryRecord>, DbError> {
    let (sql, conditions) = list_statement(tenant, filter, after, limit);
    let rows = sql::query(client, &sql, &conditions.params()).await?;
    Ok(rows.iter().map(DeliveryRecord::from_row).collect())
}

/// The plan of [`list_deliveries`] (`EXPLAIN`, one line per row): how a
/// check sees which partitions a page reads.
pub async fn explain_list_deliveries(
    client: &impl GenericClient,
    tenant: TenantId,
    filter: &DeliveryFilter,
    after: Option<TimeKey>,
    limit: i64,
) -> Result<Vec<String>, DbError> {
    let (sql, conditions) = list_statement(tenant, filter, after, limit);
    sql::explain(client, &sql, &conditions.params()).await
}

fn list_statement(
    tenant: TenantId,
    filter: &DeliveryFilter,
    after: Option<TimeKey>,
    limit: i64,
) -> (String, Conditions) {
    let mut conditions = filtered(tenant, filter);
    if let Some(key) = after {
        conditions.push_before("d.created_at", "d.id", key);
        conditions.push_partition_window("d.event_id", None, Some(key.at));
    }
    let limit = conditions.push_param(limit);
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS} FROM relayops.deliveries d WHERE {}
         ORDER BY d.created_at DESC, d.id DESC LIMIT {limit}",
        conditions.where_clause()
    );
    (sql, conditions)
}

/// How many of an endpoint's deliveries are in each status (statuses with
/// none are absent), optionally only those created in `[since, until)`.
pub async fn count_by_status(
    client: &impl GenericClient,
    tenant: TenantId,
    endpoint: EndpointId,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
) -> Result<Vec<(DeliveryStatus, i64)>, DbError> {
    let filter = DeliveryFilter { endpoint: Some(endpoint), since, until, ..DeliveryFilter::default() };
    let conditions = filtered(tenant, &filter);
    let sql = format!(
        "SELECT d.status, count(*) AS deliveries FROM relayops.deliveries d WHERE {} GROUP BY d.status",
        conditions.where_clause()
    );
    let rows = sql::query(client, &sql, &conditions.params()).await?;
    Ok(rows
        .iter()
        .filter_map(|row| DeliveryStatus::parse(row.get("status")).map(|status| (status, row.get("deliveries"))))
        .collect())
}
