//! Ordering lanes from the worker's side (see `repo::lanes`): a delivery with
//! an ordering key is claimed only as its lane's head, and the transaction
//! that makes it terminal moves the lane on (the next delivery goes `pending`
//! with its outbox message, committed with the head's attempt). Retries and
//! deferrals leave the lane as it is: the head keeps it.
//!
//! A send for a lane's head never outlives the worker's lease ([`deadline`]):
//! once the lease may have passed to another worker — which may settle the
//! head and let the next delivery go — this worker must not still be talking
//! to the receiver about the earlier one, so the request is dropped first.
use std::time::Duration;

use relayops_shared::db::DbError;
use relayops_shared::repo::deliveries::DeliveryJob;
use relayops_shared::repo::lanes::{self, AfterDeath, LaneKey};
use relayops_shared::repo::GenericClient;
use tokio::time::Instant;

/// The lane a job belongs to, if it has an ordering key.
pub fn of(job: &DeliveryJob) -> Option<LaneKey<'_>> {
    let ordering_key = job.ordering_key.as_deref()?;
    Some(LaneKey { tenant: job.tenant_id, endpoint: job.endpoint_id, ordering_key })
}

/// Takes the job's lane lock in the caller's transaction, before the settle
/// that makes the job terminal (the order every lane transaction follows:
/// lane, then deliveries).
pub async fn lock(tx: &impl GenericClient, lane: LaneKey<'_>, job: &DeliveryJob) -> Result<(), DbError> {
    let head = lanes::lock(tx, lane).await?;
    if head != Some(job.delivery_id) {
        // Only a head can be claimed; seen only if the lane was changed by
        // hand. The settle still checks the lease; the lane is left alone.
        tracing::warn!(tenant_id = %job.tenant_id, delivery_id = %job.delivery_id, head = ?head,
            "settling an ordered delivery that does not head its lane");
    }
    Ok(())
}

/// Moves the lane on from the job (just made terminal, in the caller's
/// transaction); `true` when a next delivery was released (an outbox row to
/// publish after the commit).
pub async fn move_on(tx: &impl GenericClient, lane: LaneKey<'_>, job: &DeliveryJob) -> Result<bool, DbError> {
    let released = lanes::release(tx, lane, job.delivery_id).await?;
    if let Some(next) = released {
        tracing::debug!(tenant_id = %job.tenant_id, delivery_id = %job.delivery_id, next = %next,
            "ordering lane moved on");
    }
    Ok(released.is_some())
}

/// What the job's death does to its lane (after [`lock`], in the dead
/// letter's transaction): hold it on the dead head if the endpoint blocks on
/// dead letters, else move on. `true` when a next delivery was released.
pub async fn after_death(tx: &impl GenericClient, lane: LaneKey<'_>, job: &DeliveryJob) -> Result<bool, DbError> {
    match lanes::after_death(tx, lane, job.delivery_id).await? {
        AfterDeath::Blocked => {
            tracing::info!(tenant_id = %job.tenant_id, delivery_id = %job.delivery_id, endpoint_id = %job.endpoint_id,
                "ordering lane blocked on a dead delivery until it is replayed or skipped");
            Ok(false)
        }
        AfterDeath::MovedOn(next) => {
            if let Some(next) = next {
                tracing::debug!(tenant_id = %job.tenant_id, delivery_id = %job.delivery_id, next = %next,
                    "ordering lane moved on");
            }
            Ok(next.is_some())
        }
    }
}

/// Until when a send of this job may run: its lease from the moment the claim
/// was asked for (the database's lease began later, so this ends earlier),
/// less a margin for the time the drop itself takes. `None` for unordered
/// jobs, whose sends are bounded by their timeout only.
pub fn deadline(job: &DeliveryJob, claim_asked: Instant, lease: Duration) -> Option<Instant> {
    job.ordering_key.as_ref()?;
    let margin = (lease / 10).min(Duration::from_secs(1));
    Some(claim_asked + lease.saturating_sub(margin))
}

/// The deadline after a successful lease extension asked for at `asked`.
pub fn extended(asked: Instant, lease: Duration) -> Instant {
    let margin = (lease / 10).min(Duration::from_secs(1));
    asked + lease.saturating_sub(margin)
}
