//! Endpoint health writes, made by the worker after recording an attempt.
//! Cheap enough for the hot path because they are rare: the worker decides
//! from the health its claim already read (the claim joins the endpoint row)
//! and writes only when the state changes — the first failure after a
//! success, the first success after a failure — or when the last success or
//! failure time is more than [`HEALTH_TIME_RESOLUTION_SECS`] old. A healthy
//! endpoint therefore costs no statement per delivery, only one short update
//! a minute; each statement repeats the condition, so workers racing on the
//! same change write once. Not tenant-scoped by the caller's credential: the
//! worker acts on ids from the outbox, like its other paths.
use chrono::{DateTime, Utc};

use crate::db::DbError;
use crate::ids::{EndpointId, TenantId};
use crate::repo::endpoints::{disable_if_enabled, DisabledEndpoint, EndpointHealth};
use crate::repo::{sql, GenericClient};

/// [`HEALTH_TIME_RESOLUTION_SECS`] as a literal, for the statements' text.
macro_rules! health_time_resolution_secs {
    () => {
        60
    };
}

/// How stale `last_success_at`/`last_failure_at` may get before a steady
/// state writes them again.
pub const HEALTH_TIME_RESOLUTION_SECS: i64 = health_time_resolution_secs!();

const RECORD_SUCCESS: &str = concat!(
    "UPDATE relayops.webhook_endpoints
     SET failing_since = NULL, last_success_at = now()
     WHERE tenant_id = $1 AND id = $2
       AND (failing_since IS NOT NULL OR last_success_at IS NULL OR last_success_at < now() - interval '",
    health_time_resolution_secs!(),
    " seconds')"
);

const RECORD_FAILURE: &str = concat!(
    "UPDATE relayops.webhook_endpoints
     SET failing_since = coalesce(failing_since, now()), last_failure_at = now()
     WHERE tenant_id = $1 AND id = $2
       AND (failing_since IS NULL OR last_failure_at IS NULL OR last_failure_at < now() - interval '",
    health_time_resolution_secs!(),
    " seconds')"
);

/// Disables the endpoint only if it is still enabled and still failing since
/// at least `$4` milliseconds ago (a success in the meantime cleared it).
const DISABLE_IF_FAILING: &str = disable_if_enabled!("failing_since <= now() - $4::bigint * interval '1 millisecond'");

/// What an attempt's outcome asks of the endpoint's health record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthWrite {
    /// Nothing changes (the common case).
    Nothing,
    Success,
    Failure,
    /// A failure, and every attempt has failed for the whole window: disable.
    FailureAndDisable,
}

/// Decides from the health the claim read; pure, so the rule is unit-tested.
pub fn decide(health: &EndpointHealth, delivered: bool, now: DateTime<Utc>, window: chrono::Duration) -> HealthWrite {
    let stale = |at: Option<DateTime<Utc>>| {
        at.is_none_or(|at| now - at >= chrono::Duration::seconds(HEALTH_TIME_RESOLUTION_SECS))
    };
    if delivered {
        return if health.failing_since.is_some() || stale(health.last_success_at) {
            HealthWrite::Success
        } else {
            HealthWrite::Nothing
        };
    }
    match health.failing_since {
        Some(since) if now - since >= window => HealthWrite::FailureAndDisable,
        Some(_) if !stale(health.last_failure_at) => HealthWrite::Nothing,
        _ => HealthWrite::Failure,
    }
}

pub async fn record_success(client: &impl GenericClient, tenant: TenantId, id: EndpointId) -> Result<(), DbError> {
    sql::execute(client, RECORD_SUCCESS, &[&tenant.as_uuid(), &id.as_uuid()]).await?;
    Ok(())
}

pub async fn record_failure(client: &impl GenericClient, tenant: TenantId, id: EndpointId) -> Result<(), DbError> {
    sql::execute(client, RECORD_FAILURE, &[&tenant.as_uuid(), &id.as_uuid()]).await?;
    Ok(())
}

/// Disables the endpoint if every attempt has failed for `window`; `None` when
/// it recovered, was disabled already, or is gone.
pub async fn disable_if_failing(
    client: &impl GenericClient,
    tenant: TenantId,
    id: EndpointId,
    window: std::time::Duration,
    reason: &str,
) -> Result<Option<DisabledEndpoint>, DbError> {
    let window_ms = window.as_millis().min(i64::MAX as u128) as i64;
    let row =
        sql::query_opt(client, DISABLE_IF_FAILING, &[&tenant.as_uuid(), &id.as_uuid(), &reason, &window_ms]).await?;
    Ok(row.as_ref().map(crate::repo::endpoints::disabled_from_row))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("time")
    }

    #[test]
    fn a_steady_state_writes_at_most_once_a_minute() {
        let window = chrono::Duration::days(5);
        let healthy = EndpointHealth { last_success_at: Some(at(0)), ..EndpointHealth::default() };
        assert_eq!(decide(&healthy, true, at(30), window), HealthWrite::Nothing);
        assert_eq!(decide(&healthy, true, at(61), window), HealthWrite::Success);
        let failing = EndpointHealth { failing_since: Some(at(0)), last_failure_at: Some(at(0)), ..healthy };
        assert_eq!(decide(&failing, false, at(30), window), HealthWrite::Nothing);
        assert_eq!(decide(&failing, false, at(61), window), HealthWrite::Failure);
    }

    #[test]
    fn state_changes_always_write() {
        let window = chrono::Duration::seconds(10);
        let healthy = EndpointHealth { last_success_at: Some(at(0)), ..EndpointHealth::default() };
        assert_eq!(decide(&healthy, false, at(1), window), HealthWrite::Failure);
        let failing = EndpointHealth { failing_since: Some(at(0)), last_failure_at: Some(at(0)), ..healthy };
        assert_eq!(decide(&failing, true, at(1), window), HealthWrite::Success);
        assert_eq!(decide(&EndpointHealth::default(), true, at(1), window), HealthWrite::Success);
    }

    #[test]
    fn failing_for_the_whole_window_disables() {
        let window = chrono::Duration::seconds(10);
        let failing = EndpointHealth { failing_since: Some(at(0)), last_failure_at: Some(at(9)), ..Default::default() };
        assert_eq!(decide(&failing, false, at(9), window), HealthWrite::Nothing);
        assert_eq!(decide(&failing, false, at(10), window), HealthWrite::FailureAndDisable);
        assert_eq!(decide(&failing, true, at(10), window), HealthWrite::Success);
    }
}
