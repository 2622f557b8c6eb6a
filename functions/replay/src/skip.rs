//! `POST /v1/deliveries/{id}/skip`: an ordering lane blocked on a dead
//! delivery (its endpoint's `dead_letter_lane` is `block`) moves on past it.
//! The dead delivery stays dead (it can still be replayed, to the back of its
//! lane); the next delivery of the key is released in the same transaction.
use axum::extract::{Path, State};
use axum::Json;
use relayops_shared::api::{parse_path_id, ApiError, ApiState, Authenticated};
use relayops_shared::auth::Scope;
use relayops_shared::ids::{DeliveryId, EndpointId};
use relayops_shared::repo::lanes::{self, SkipOutcome};
use serde::Serialize;
use utoipa::ToSchema;

/// A lane that moved on past its dead delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkippedView {
    /// The dead delivery skipped (still `dead`).
    id: DeliveryId,
    endpoint_id: EndpointId,
    ordering_key: String,
    /// The delivery of the key sent next, if one was waiting.
    released: Option<DeliveryId>,
}

/// Skips the dead delivery a blocked ordering lane is held on: the lane goes
/// on with the next delivery of its key. 409 when the delivery holds no
/// blocked lane (not dead, not ordered, already replayed or skipped).
#[utoipa::path(
    post, path = "/v1/deliveries/{delivery_id}/skip", tag = "replay",
    params(("delivery_id" = DeliveryId, Path, description = "The dead delivery (`dlv_…`)")),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The lane moved on", body = SkippedView),
        (status = 404, description = "No such delivery"),
        (status = 409, description = "The delivery holds no blocked ordering lane")
    )
)]
pub async fn skip(
    State(state): State<ApiState>,
    caller: Authenticated,
    Path(delivery_id): Path<String>,
) -> Result<Json<SkippedView>, ApiError> {
    caller.require(Scope::Admin)?;
    let delivery_id: DeliveryId = parse_path_id(&delivery_id)?;
    let skipped = match lanes::skip_one(&state.pool, caller.tenant_id, delivery_id).await? {
        SkipOutcome::Skipped(skipped) => skipped,
        SkipOutcome::NotFound => return Err(ApiError::NotFound("delivery")),
        SkipOutcome::HoldsNoLane(status) => {
            return Err(ApiError::Conflict(format!(
                "delivery {delivery_id} ({status}) holds no blocked ordering lane; only a dead delivery an endpoint \
                 with `dead_letter_lane: block` is held on can be skipped"
            )))
        }
    };
    if skipped.released.is_some() {
        state.wake_publisher();
    }
    tracing::info!(tenant_id = %caller.tenant_id, delivery_id = %delivery_id, endpoint_id = %skipped.endpoint,
        released = ?skipped.released, "blocked ordering lane skipped its dead delivery");
    Ok(Json(SkippedView {
        id: delivery_id,
        endpoint_id: skipped.endpoint,
        ordering_key: skipped.ordering_key,
        released: skipped.released,
    }))
}
