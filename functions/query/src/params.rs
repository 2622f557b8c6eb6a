//! Query-string parameters of the lists, and their validation: every mistake is
//! a 400 problem naming the parameter (unknown parameters included, so a typo
//! never silently widens a filter).
use chrono::{DateTime, Utc};
use relayops_shared::api::ApiError;
use relayops_shared::domain::{DeliveryStatus, EventType, OrderingKey};
use serde::Deserialize;
use utoipa::IntoParams;

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 500;

fn bad(parameter: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!("`{parameter}`: {message}"))
}

/// Page size: 1 to 500, 50 when absent.
pub fn limit(value: Option<i64>) -> Result<i64, ApiError> {
    match value {
        None => Ok(DEFAULT_LIMIT),
        Some(limit @ 1..=MAX_LIMIT) => Ok(limit),
        Some(_) => Err(bad("limit", format!("must be between 1 and {MAX_LIMIT}"))),
    }
}

pub fn event_type(value: Option<&str>) -> Result<Option<EventType>, ApiError> {
    value.map(|text| EventType::parse(text).map_err(|error| bad("event_type", error.message))).transpose()
}

pub fn ordering_key(value: Option<&str>) -> Result<Option<OrderingKey>, ApiError> {
    value.map(|text| OrderingKey::parse(text).map_err(|error| bad("ordering_key", error.message))).transpose()
}

pub fn status(value: Option<&str>) -> Result<Option<DeliveryStatus>, ApiError> {
    value
        .map(|text| {
            DeliveryStatus::parse(text).ok_or_else(|| {
                bad("status", "must be pending, in_progress, scheduled, parked, delivered, failed or dead")
            })
        })
        .transpose()
}

/// `[since, until)`; either end may be open.
pub type TimeRange = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// `since` must come before `until` when both are given.
pub fn time_range(since: Option<DateTime<Utc>>, until: Option<DateTime<Utc>>) -> Result<TimeRange, ApiError> {
    match (since, until) {
        (Some(since), Some(until)) if since >= until => Err(bad("since", "must be before `until`")),
        range => Ok(range),
    }
}

/// `GET /v1/events`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventListParams {
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// `next_cursor` from the previous page; absent for the first page.
    pub cursor: Option<String>,
    /// Only events of this exact type.
    pub event_type: Option<String>,
    /// Only events posted with this ordering key.
    pub ordering_key: Option<String>,
    /// Only events received at or after this time (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Only events received before this time (RFC 3339).
    pub until: Option<DateTime<Utc>>,
}

/// `GET /v1/deliveries`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveryListParams {
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// `next_cursor` from the previous page; absent for the first page.
    pub cursor: Option<String>,
    /// Only deliveries in this status (`status=dead` is the dead-letter view).
    #[param(pattern = "^(pending|in_progress|scheduled|parked|delivered|failed|dead)$")]
    pub status: Option<String>,
    /// Only deliveries to this endpoint (`ep_…`).
    pub endpoint_id: Option<String>,
    /// Only deliveries of events of this exact type.
    pub event_type: Option<String>,
    /// Only deliveries of events posted with this ordering key.
    pub ordering_key: Option<String>,
    /// Only deliveries created at or after this time (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Only deliveries created before this time (RFC 3339).
    pub until: Option<DateTime<Utc>>,
}

/// A page and nothing else: `GET /v1/deliveries/{delivery_id}/attempts`,
/// `GET /v1/endpoints/{endpoint_id}/blocked-lanes`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// `next_cursor` from the previous page; absent for the first page.
    pub cursor: Option<String>,
}

/// `GET /v1/endpoints/{endpoint_id}/stats`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StatsParams {
    /// Count only deliveries created at or after this time (RFC 3339).
    pub since: Option<DateTime<Utc>>,
    /// Count only deliveries created before this time (RFC 3339).
    pub until: Option<DateTime<Utc>>,
}
