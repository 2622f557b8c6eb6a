//! Operators' list of events: filtered keyset pages, newest first by
//! `(received_at, id)` (see [`delivery_queries`](super::delivery_queries) for
//! why a walk through the pages neither repeats nor skips a row).
use crate::repo::GenericClient;
use chrono::{DateTime, Utc};

use crate::db::DbError;
use crate::domain::{EventType, OrderingKey};
use crate::ids::TenantId;
use crate::repo::delivery_queries::{Conditions, TimeKey};
use crate::repo::events::{EventRecord, EVENT_COLUMNS};
use crate::repo::sql;

/// Filters for the list of events; `None` means "any".
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub event_type: Option<EventType>,
    /// Posted with this ordering key.
    pub ordering_key: Option<OrderingKey>,
    /// Received at or after.
    pub since: Option<DateTime<Utc>>,
    /// Received before.
    pub until: Option<DateTime<Utc>>,
}

/// Up to `limit` events after `after`, newest first, within the tenant.
pub async fn list_events(
    client: &impl GenericClient,
    tenant: TenantId,
    filter: &EventFilter,
    after: Option<TimeKey>,
    limit: i64,
) -> Result<Vec<EventRecord>, DbError> {
    let (sql, conditions) = list_statement(tenant, filter, after, limit);
    let rows = sql::query(client, &sql, &conditions.params()).await?;
    Ok(rows.iter().map(EventRecord::from_row).collect())
}

/// The plan of [`list_events`] (`EXPLAIN`, one line per row): how a check
/// sees which partitions a page reads.
pub async fn explain_list_events(
    client: &impl GenericClient,
    tenant: TenantId,
    filter: &EventFilter,
    after: Option<TimeKey>,
    limit: i64,
) -> Result<Vec<String>, DbError> {
    let (sql, conditions) = list_statement(tenant, filter, after, limit);
    sql::explain(client, &sql, &conditions.params()).await
}

fn list_statement(tenant: TenantId, filter: &EventFilter, after: Option<TimeKey>, limit: i64) -> (String, Conditions) {
    let mut conditions = Conditions::new();
    conditions.push("tenant_id = {}", tenant.as_uuid());
    if let Some(event_type) = &filter.event_type {
        conditions.push("event_type = {}", event_type.as_str().to_owned());
    }
    if let Some(ordering_key) = &filter.ordering_key {
        conditions.push("ordering_key = {}", ordering_key.as_str().to_owned());
    }
    if let Some(since) = filter.since {
        conditions.push("received_at >= {}", since);
    }
    if let Some(until) = filter.until {
        conditions.push("received_at < {}", until);
    }
    if let Some(key) = after {
        conditions.push_before("received_at", "id", key);
    }
    let before = match (after.map(|key| key.at), filter.until) {
        (Some(cursor), Some(until)) => Some(cursor.min(until)),
        (cursor, until) => cursor.or(until),
    };
    conditions.push_partition_window("id", filter.since, before);
    let limit = conditions.push_param(limit);
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM relayops.events WHERE {}
         ORDER BY received_at DESC, id DESC LIMIT {limit}",
        conditions.where_clause()
    );
    (sql, conditions)
}
