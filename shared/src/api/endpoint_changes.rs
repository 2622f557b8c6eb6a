//! Changing an endpoint as the API's `PATCH /v1/endpoints/{id}` does, for
//! every caller (manage's PATCH, the console's enable/disable form): one
//! transaction, the `endpoint.enabled` / `endpoint.disabled` operational
//! event when the change switched it, the publisher woken after the commit;
//! and how long a rotated-out signing secret keeps signing by default.
use super::ApiState;
use crate::db::DbError;
use crate::domain::operational::{DisabledBy, OperationalEvent, Subject};
use crate::ids::{EndpointId, TenantId};
use crate::repo::endpoints::{self, EndpointChanges, EndpointRecord};
use crate::repo::operational;

/// How long an old secret keeps signing beside its replacement unless the
/// rotation says otherwise.
pub const DEFAULT_GRACE_SECS: i64 = 24 * 3600;

/// Applies `changes` to the tenant's endpoint as the PATCH does (the console's
/// enable/disable form uses it too): in one transaction, the update and, when
/// it switched the endpoint on or off, the `endpoint.enabled` /
/// `endpoint.disabled` operational event; after the commit the publisher is
/// woken if an event was stored. `None`: no such endpoint in the tenant.
pub async fn apply_changes(
    state: &ApiState,
    tenant: TenantId,
    id: EndpointId,
    changes: &EndpointChanges<'_>,
) -> Result<Option<EndpointRecord>, DbError> {
    let mut client = state.pool.get().await?;
    let tx = client.transaction().await?;
    let Some(updated) = endpoints::update_endpoint(&tx, tenant, id, changes).await? else {
        return Ok(None);
    };
    let endpoint = updated.endpoint;
    let mut emitted = false;
    if let Some(enabled) = updated.switched {
        let subject = Subject { id, kind: endpoint.kind, url: endpoint.url.clone() };
        emitted = if enabled {
            operational::emit(&tx, tenant, &OperationalEvent::endpoint_enabled(tenant, &subject)).await?
        } else {
            let reason = endpoint.disabled_reason.as_deref().unwrap_or("disabled by an operator");
            operational::emit_disabled(&tx, tenant, &subject, DisabledBy::Operator, reason, None).await?
        };
    }
    tx.commit().await?;
    if emitted {
        state.wake_publisher();
    }
    Ok(Some(endpoint))
}
