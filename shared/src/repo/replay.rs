//! Replay: a dead or failed delivery goes back to pending with a new outbox row,
//! in the caller's transaction. Attempt numbers keep counting up because
//! `attempt_count` is left as it is.
use deadpool_postgres::GenericClient;

use crate::broker::envelope::{DeliveryTask, QueueMessage};
use crate::db::DbError;
use crate::domain::DeliveryStatus;
use crate::ids::{DeliveryId, EndpointId, EventId, TenantId};

const REVIVE: &str = "UPDATE relayops.deliveries
     SET status = 'pending', next_attempt_at = NULL, updated_at = now()
     WHERE tenant_id = $1 AND id = $2 AND status IN ('dead', 'failed')
     RETURNING event_id, endpoint_id";

const CURRENT_STATUS: &str =
    "SELECT status FROM relayops.deliveries WHERE tenant_id = $1 AND id = $2";

const INSERT_OUTBOX: &str =
    "INSERT INTO relayops.outbox_messages (tenant_id, delivery_id, envelope) VALUES ($1, $2, $3)";

#[derive(Debug, PartialEq, Eq)]
pub enum ReplayOutcome {
    Replayed,
    NotFound,
    /// Only dead or failed deliveries can be replayed.
    NotReplayable(DeliveryStatus),
}

pub async fn replay_delivery(
    tx: &impl GenericClient,
    tenant: TenantId,
    id: DeliveryId,
) -> Result<ReplayOutcome, DbError> {
    let Some(row) = tx
        .query_opt(REVIVE, &[&tenant.as_uuid(), &id.as_uuid()])
        .await?
    else {
        let status = tx
            .query_opt(CURRENT_STATUS, &[&tenant.as_uuid(), &id.as_uuid()])
            .await?;
        return Ok(
            match status.and_then(|row| DeliveryStatus::parse(row.get(0))) {
                Some(status) => ReplayOutcome::NotReplayable(status),
                None => ReplayOutcome::NotFound,
            },
        );
    };
    let task = DeliveryTask {
        tenant_id: tenant,
        delivery_id: id,
        event_id: EventId::from_uuid(row.get("event_id")),
        endpoint_id: EndpointId::from_uuid(row.get("endpoint_id")),
    };
    tx.execute(
        INSERT_OUTBOX,
        &[
            &tenant.as_uuid(),
            &id.as_uuid(),
            &QueueMessage::DeliveryV1(task).to_json(),
        ],
    )
    .await?;
    Ok(ReplayOutcome::Replayed)
}
