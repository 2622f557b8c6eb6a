//! Ordering lanes in the console (SPEC §11): on the endpoint page, the lanes
//! held on a dead delivery (when the endpoint's `dead_letter_lane` is
//! `block`) — the ordering key, the dead delivery, how many wait behind it,
//! since when — each with a Skip button; and the skip itself,
//! `POST /console/deliveries/{id}/skip`. Same repository calls as
//! `GET /v1/endpoints/{id}/blocked-lanes` (`repo::lanes::list_blocked`) and
//! `POST /v1/deliveries/{id}/skip` (`repo::lanes::skip_one`), with the
//! session's tenant: another tenant's delivery is "not found" and nothing
//! changes.
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use relayops_shared::api::{parse_path_id, ApiError, ApiState};
use relayops_shared::domain::DeadLetterLane;
use relayops_shared::ids::{DeliveryId, EndpointId};
use relayops_shared::repo::endpoints::EndpointRecord;
use relayops_shared::repo::lanes::{self, BlockedLane, SkipOutcome};
use relayops_shared::repo::GenericClient;

use crate::error::ConsoleError;
use crate::filters::encode;
use crate::layout::{self, csrf_field};
use crate::session::{ConsoleForm, NoFields, Session};

/// The most blocked lanes the endpoint page lists (the API pages beyond).
const MAX_SHOWN: i64 = 50;

/// The endpoint's blocked lanes, most recently blocked first, and whether
/// there are more than the page shows.
pub struct BlockedLanes {
    lanes: Vec<BlockedLane>,
    more: bool,
}

impl BlockedLanes {
    pub async fn load(
        client: &impl GenericClient,
        session: &Session,
        endpoint: EndpointId,
    ) -> Result<Self, ConsoleError> {
        let mut lanes = lanes::list_blocked(client, session.tenant(), endpoint, None, MAX_SHOWN + 1).await?;
        let more = lanes.len() as i64 > MAX_SHOWN;
        lanes.truncate(MAX_SHOWN as usize);
        Ok(Self { lanes, more })
    }

    /// The endpoint page's card: shown when the endpoint blocks on dead
    /// letters, or still has lanes blocked from when it did.
    pub fn card(&self, session: &Session, endpoint: &EndpointRecord) -> Markup {
        if endpoint.dead_letter_lane != DeadLetterLane::Block && self.lanes.is_empty() {
            return html! {};
        }
        html! {
            section.card #blocked-lanes {
                h2 { "Blocked ordering lanes" }
                p.muted {
                    "A lane whose delivery died waits here: replay the dead delivery (the lane goes on once it is \
                     delivered) or skip it (the lane goes on at once; the skipped delivery stays dead)."
                }
                @if self.lanes.is_empty() { p.muted #no-blocked-lanes { "None: every lane is moving." } }
                @else {
                    div.scroll {
                        table.lanes {
                            thead { tr { th { "Ordering key" } th { "Dead delivery" } th { "Waiting behind it" } th { "Blocked since (UTC)" } th {} } }
                            tbody {
                                @for lane in &self.lanes { (row(session, endpoint.id, lane)) }
                            }
                        }
                    }
                    @if self.more {
                        p.muted {
                            "The " (MAX_SHOWN) " most recently blocked are shown; "
                            code { "GET /v1/endpoints/" (endpoint.id) "/blocked-lanes" } " lists them all."
                        }
                    }
                }
            }
        }
    }
}

fn row(session: &Session, endpoint: EndpointId, lane: &BlockedLane) -> Markup {
    let key_deliveries = format!("/console/deliveries?endpoint={endpoint}&ordering_key={}", encode(&lane.ordering_key));
    html! {
        tr data-lane=(lane.ordering_key) data-delivery=(lane.delivery_id) {
            td { a href=(key_deliveries) { code { (lane.ordering_key) } } }
            td { a.id href=(format!("/console/deliveries/{}", lane.delivery_id)) { (lane.delivery_id) } }
            td.num.waiting { (lane.waiting) }
            td { (layout::time(lane.blocked_since)) " · " (layout::age(lane.blocked_since)) }
            td {
                form method="post" action=(format!("/console/deliveries/{}/skip", lane.delivery_id)) {
                    (csrf_field(session))
                    button.skip type="submit" { "Skip" }
                }
            }
        }
    }
}

/// Skips the dead delivery a blocked lane is held on, then shows its
/// endpoint again. A delivery of another tenant, or none, is "not found";
/// one that holds no blocked lane is a 409 that says so. Nothing changes in
/// either case.
pub async fn skip(
    State(state): State<ApiState>,
    Path(delivery_id): Path<String>,
    form: ConsoleForm<NoFields>,
) -> Result<Response, ConsoleError> {
    form.session.require_admin()?;
    let id: DeliveryId = parse_path_id(&delivery_id).map_err(|_| ConsoleError::NotFound("delivery"))?;
    let tenant = form.session.tenant();
    match lanes::skip_one(&state.pool, tenant, id).await? {
        SkipOutcome::Skipped(skipped) => {
            if skipped.released.is_some() {
                state.wake_publisher();
            }
            tracing::info!(tenant_id = %tenant, delivery_id = %id, endpoint_id = %skipped.endpoint,
                released = ?skipped.released, "blocked ordering lane skipped in the console");
            Ok(Redirect::to(&format!("/console/endpoints/{}?skipped=1", skipped.endpoint)).into_response())
        }
        SkipOutcome::NotFound => Err(ConsoleError::NotFound("delivery")),
        SkipOutcome::HoldsNoLane(status) => Err(ApiError::Conflict(format!(
            "Nothing to skip: this delivery is {} and holds no blocked ordering lane. Only a dead delivery that \
             an endpoint blocking on dead letters is held on can be skipped (it may have been replayed or \
             skipped already).",
            status.replace('_', " ")
        ))
        .into()),
    }
}
