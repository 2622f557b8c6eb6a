//! Endpoint health after each recorded attempt (see
//! `relayops_shared::repo::endpoint_health` for the rule and its cost): most
//! attempts write nothing; a state change writes one short statement; an
//! endpoint whose every attempt has failed for the configured window is
//! disabled, with `endpoint.disabled` to the tenant's operational endpoints in
//! the same transaction. Its remaining deliveries are then settled `failed`
//! without a send as each comes up (the disabled path in `process`).
//!
//! Health is advice, not a promise: a failed health write is logged and the
//! attempt stays recorded; the next attempt writes again.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::Utc;
use relayops_shared::api::PublisherWakeup;
use relayops_shared::db::{DbError, Pool};
use relayops_shared::domain::operational::DisabledBy;
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::deliveries::DeliveryJob;
use relayops_shared::repo::endpoint_health::{self, HealthWrite};
use relayops_shared::repo::endpoints::EndpointHealth;
use relayops_shared::repo::operational;
use relayops_shared::telemetry::error_chain;

use crate::report;

/// Past this many remembered endpoints, the memory starts afresh.
const MEMO_LIMIT: usize = 4_096;

/// Which write this process last made for each endpoint, and from which health
/// snapshot. Claims made before a write commits all read the same (stale)
/// snapshot: without this, each of them would repeat the write (a burst of
/// no-op statements as large as the messages in flight — measured: 306 health
/// statements for 4,000 deliveries to 11 fresh endpoints). The same write for
/// the same snapshot is made once; a snapshot another process changed is a
/// different key, so nothing another worker wrote is ever ignored.
#[derive(Default)]
pub struct HealthMemo {
    written: Mutex<HashMap<EndpointId, (EndpointHealth, HealthWrite)>>,
}

impl HealthMemo {
    /// True when this write is new for this snapshot (and remembers it).
    fn first(&self, endpoint: EndpointId, snapshot: EndpointHealth, write: HealthWrite) -> bool {
        let mut written = self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if written.get(&endpoint) == Some(&(snapshot, write)) {
            return false;
        }
        if written.len() >= MEMO_LIMIT {
            written.clear();
        }
        written.insert(endpoint, (snapshot, write));
        true
    }

    /// Forgets a write that failed, so the next attempt makes it again.
    fn forget(&self, endpoint: EndpointId) {
        self.written.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&endpoint);
    }
}

/// Records what this attempt says about the endpoint's health.
pub async fn after_attempt(
    memo: &HealthMemo,
    pool: &Pool,
    wakeup: &dyn PublisherWakeup,
    job: &DeliveryJob,
    delivered: bool,
    window: Duration,
) {
    let chrono_window = chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    let write = endpoint_health::decide(&job.endpoint_health, delivered, Utc::now(), chrono_window);
    if write == HealthWrite::Nothing || !memo.first(job.endpoint_id, job.endpoint_health, write) {
        return;
    }
    if let Err(error) = apply(pool, wakeup, job, write, window).await {
        memo.forget(job.endpoint_id);
        tracing::warn!(tenant_id = %job.tenant_id, endpoint_id = %job.endpoint_id, error = %error_chain(&error),
            "endpoint health not recorded");
    }
}

async fn apply(
    pool: &Pool,
    wakeup: &dyn PublisherWakeup,
    job: &DeliveryJob,
    write: HealthWrite,
    window: Duration,
) -> Result<(), DbError> {
    let (tenant, endpoint) = (job.tenant_id, job.endpoint_id);
    match write {
        HealthWrite::Nothing => Ok(()),
        HealthWrite::Success => {
            let client = pool.get().await?;
            report::health_write("success");
            endpoint_health::record_success(&client, tenant, endpoint).await
        }
        HealthWrite::Failure => {
            let client = pool.get().await?;
            report::health_write("failure");
            endpoint_health::record_failure(&client, tenant, endpoint).await
        }
        HealthWrite::FailureAndDisable => {
            let mut client = pool.get().await?;
            let tx = client.transaction().await?;
            endpoint_health::record_failure(&tx, tenant, endpoint).await?;
            let reason = format!("every attempt failed for {} or longer", describe(window));
            let Some(disabled) = endpoint_health::disable_if_failing(&tx, tenant, endpoint, window, &reason).await?
            else {
                return Ok(tx.commit().await?);
            };
            let (subject, since) = (&disabled.subject, disabled.failing_since);
            let emitted = operational::emit_disabled(&tx, tenant, subject, DisabledBy::Health, &reason, since).await?;
            tx.commit().await?;
            if emitted {
                wakeup.wake();
            }
            report::health_write("disabled");
            tracing::warn!(tenant_id = %tenant, endpoint_id = %endpoint, failing_since = ?disabled.failing_since,
                %reason, "endpoint disabled automatically");
            Ok(())
        }
    }
}

/// "5 days", "3 s": the window as a person reads it.
fn describe(window: Duration) -> String {
    let secs = window.as_secs();
    match secs {
        s if s >= 86_400 && s % 86_400 == 0 => format!("{} days", s / 86_400),
        s if s >= 3_600 && s % 3_600 == 0 => format!("{} h", s / 3_600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_write_for_the_same_snapshot_is_made_once() {
        let memo = HealthMemo::default();
        let endpoint = EndpointId::new();
        let fresh = EndpointHealth::default();
        assert!(memo.first(endpoint, fresh, HealthWrite::Success));
        assert!(!memo.first(endpoint, fresh, HealthWrite::Success), "claims from before the write");
        assert!(memo.first(endpoint, fresh, HealthWrite::Failure), "another write");
        let changed = EndpointHealth { failing_since: Some(Utc::now()), ..fresh };
        assert!(memo.first(endpoint, changed, HealthWrite::Success), "another snapshot (someone else wrote)");
        memo.forget(endpoint);
        assert!(memo.first(endpoint, changed, HealthWrite::Success), "a failed write is made again");
        assert!(memo.first(EndpointId::new(), fresh, HealthWrite::Success), "per endpoint");
    }

    #[test]
    fn windows_read_as_people_write_them() {
        assert_eq!(describe(Duration::from_secs(5 * 86_400)), "5 days");
        assert_eq!(describe(Duration::from_secs(7_200)), "2 h");
        assert_eq!(describe(Duration::from_secs(90)), "90 s");
        assert_eq!(describe(Duration::from_secs(3)), "3 s");
    }
}
