//! One delivery: where it stands (with its ordering key, if any), its event's payload, and every attempt —
//! the request headers sent (the signature is never stored, so never shown),
//! the status and start of the body that came back, latency and error — plus
//! replay (`repo::replay::replay_delivery` in a transaction, as
//! `POST /v1/deliveries/{id}/replay` does).
use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::{html, Markup};
use relayops_shared::api::{parse_path_id, ApiState};
use relayops_shared::db::DbError;
use relayops_shared::domain::DeadLetterLane;
use relayops_shared::ids::DeliveryId;
use relayops_shared::repo::attempts::{self, AttemptRecordRow};
use relayops_shared::repo::replay::{self, ReplayOutcome};
use relayops_shared::repo::{deliveries, endpoints, events};
use serde::Deserialize;

use crate::error::ConsoleError;
use crate::events::pretty_json;
use crate::filters::encode;
use crate::layout::{self, csrf_field, Refresh, Section};
use crate::session::{ConsoleForm, Session};

/// The most attempts one page shows (the API pages beyond).
const MAX_ATTEMPTS: i64 = 200;

fn delivery_id(text: &str) -> Result<DeliveryId, ConsoleError> {
    parse_path_id(text).map_err(|_| ConsoleError::NotFound("delivery"))
}

/// How often a page of a delivery still under way reloads itself: soon
/// while it is queued or being sent, less often while it waits for a retry
/// or a closed circuit.
const REFRESH_SOON_SECS: u32 = 2;
const REFRESH_WAITING_SECS: u32 = 5;

/// `?from=` of a delivery page opened from the dead letters (that section
/// stays highlighted, through a replay too).
pub const FROM_DEAD_LETTERS: &str = "dead-letters";

/// The list a delivery page was opened from ([`FROM_DEAD_LETTERS`] or,
/// anything else, the delivery log).
fn section_of(from: Option<&str>) -> Section {
    match from {
        Some(FROM_DEAD_LETTERS) => Section::DeadLetters,
        _ => Section::Deliveries,
    }
}

#[derive(Deserialize)]
pub struct ShowQuery {
    #[serde(default)]
    replayed: Option<String>,
    #[serde(default)]
    from: Option<String>,
}

impl ShowQuery {
    /// This page's query again, for links and reloads that keep it.
    fn again(&self) -> String {
        let mut parts = Vec::new();
        if self.replayed.is_some() {
            parts.push("replayed=1".to_owned());
        }
        if section_of(self.from.as_deref()) == Section::DeadLetters {
            parts.push(format!("from={FROM_DEAD_LETTERS}"));
        }
        match parts.is_empty() {
            true => String::new(),
            false => format!("?{}", parts.join("&")),
        }
    }
}

/// Whether a delivery has reached a state it leaves only by a replay.
fn settled(status: &str) -> bool {
    matches!(status, "delivered" | "dead" | "failed")
}

pub async fn show(
    State(state): State<ApiState>,
    session: Session,
    Path(delivery_id_text): Path<String>,
    Query(query): Query<ShowQuery>,
) -> Result<Html<String>, ConsoleError> {
    let id = delivery_id(&delivery_id_text)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let delivery =
        deliveries::get_delivery(&client, session.tenant(), id).await?.ok_or(ConsoleError::NotFound("delivery"))?;
    let event = events::get_event(&client, session.tenant(), delivery.event_id).await?;
    let endpoint = endpoints::get_endpoint(&client, session.tenant(), delivery.endpoint_id).await?;
    let attempts = attempts::list_attempts(&client, session.tenant(), id, 0, MAX_ATTEMPTS).await?;
    let replayable = matches!(delivery.status.as_str(), "dead" | "failed");
    // A dead ordered delivery of an endpoint that blocks on dead letters may
    // hold its lane: the endpoint page lists the lanes held, with a skip.
    let holds_lane = delivery.status == "dead"
        && endpoint.as_ref().is_some_and(|endpoint| endpoint.dead_letter_lane == DeadLetterLane::Block);
    let settled = settled(&delivery.status);
    let body = html! {
        @if query.replayed.is_some() {
            @if settled {
                p.notice { "Replayed: the delivery is now " (delivery.status.replace('_', " ")) "." }
            } @else {
                p.notice { "Replay requested: the delivery is back in line. This page follows it until it settles." }
            }
        }
        section.card {
            dl.pairs {
                dt { "Delivery" } dd { code.id { (delivery.id) } }
                dt { "Status" } dd #status { (layout::status_badge(&delivery.status)) }
                dt { "Endpoint" } dd {
                    @match &endpoint {
                        Some(endpoint) => a href=(format!("/console/endpoints/{}", endpoint.id)) { (endpoint.url) },
                        None => span.muted { "(deleted endpoint)" },
                    }
                }
                dt { "Event" } dd {
                    a href=(format!("/console/events/{}", delivery.event_id)) { (delivery.event_id) }
                    @if let Some(event) = &event { " · " code { (event.event_type) } }
                }
                @if let Some(key) = &delivery.ordering_key {
                    dt { "Ordering key" } dd #ordering-key {
                        a href=(format!("/console/deliveries?endpoint={}&ordering_key={}", delivery.endpoint_id, encode(key))) { code { (key) } }
                        @if holds_lane { " · " a href=(format!("/console/endpoints/{}#blocked-lanes", delivery.endpoint_id)) { "its lane may wait on it: replay or skip" } }
                    }
                }
                dt { "Attempts" } dd { (delivery.attempt_count) }
                @if let Some(at) = delivery.next_attempt_at { dt { "Next attempt" } dd { (layout::time(at)) } }
                @if let Some(at) = delivery.delivered_at { dt { "Delivered" } dd { (layout::time(at)) } }
                @if let Some(error) = &delivery.last_error { dt { "Last error" } dd.error { (error) } }
                dt { "Created" } dd { (layout::time(delivery.created_at)) }
            }
            @if replayable {
                form method="post" action=(format!("/console/deliveries/{id}/replay")) {
                    (csrf_field(&session))
                    @if section_of(query.from.as_deref()) == Section::DeadLetters { input type="hidden" name="from" value=(FROM_DEAD_LETTERS); }
                    button #replay type="submit" { "Replay this delivery" }
                }
            }
        }
        section.card {
            h2 { "Attempts" }
            @if attempts.is_empty() { p.muted { "No attempt yet." } }
            @for attempt in &attempts { (attempt_card(attempt)) }
        }
        @if let Some(event) = &event {
            section.card {
                h2 { "Payload" }
                pre.payload { (pretty_json(&event.payload)) }
            }
        }
    };
    // While the delivery is under way the page follows it by itself.
    let refresh = (!settled).then(|| Refresh {
        secs: match delivery.status.as_str() {
            "pending" | "in_progress" => REFRESH_SOON_SECS,
            _ => REFRESH_WAITING_SECS,
        },
        url: format!("/console/deliveries/{id}{}", query.again()),
    });
    Ok(layout::refreshing_page(&session, section_of(query.from.as_deref()), "Delivery", body, refresh))
}

fn attempt_card(attempt: &AttemptRecordRow) -> Markup {
    let headers: Vec<(String, String)> = attempt
        .request_headers
        .as_object()
        .map(|object| {
            object
                .iter()
                .map(|(name, value)| (name.clone(), value.as_str().unwrap_or(&value.to_string()).to_owned()))
                .collect()
        })
        .unwrap_or_default();
    html! {
        details.attempt open[attempt.outcome != "delivered"] data-attempt=(attempt.attempt_number) {
            summary {
                "#" (attempt.attempt_number) " "
                (layout::status_badge(&attempt.outcome)) " "
                @if let Some(status) = attempt.http_status { "HTTP " (status) " · " }
                (attempt.latency_ms) " ms · " (layout::time(attempt.started_at))
            }
            @if let Some(error) = &attempt.error { p.error { (error) } }
            h3 { "Request headers sent" }
            @if headers.is_empty() { p.muted { "Not recorded." } }
            table.headers { @for (name, value) in &headers { tr { th { (name) } td { (value) } } } }
            h3 { "Response (first bytes)" }
            @match &attempt.response_body {
                Some(body) if !body.is_empty() => pre.response { (body) },
                _ => p.muted { "No body." },
            }
        }
    }
}

#[derive(Deserialize)]
pub struct ReplayFields {
    /// The list the page was opened from, kept on the page shown after.
    #[serde(default)]
    from: Option<String>,
}

/// Puts a dead or failed delivery back in line, then shows it again.
pub async fn replay(
    State(state): State<ApiState>,
    Path(delivery_id_text): Path<String>,
    form: ConsoleForm<ReplayFields>,
) -> Result<Response, ConsoleError> {
    form.session.require_admin()?;
    let id = delivery_id(&delivery_id_text)?;
    let tenant = form.session.tenant();
    match replay::replay_one(&state.pool, tenant, id).await? {
        ReplayOutcome::Replayed(previous) | ReplayOutcome::Queued(previous) => {
            state.wake_publisher();
            tracing::info!(tenant_id = %tenant, delivery_id = %id, previous_status = previous.as_str(),
                "delivery replayed in the console");
            let shown = ShowQuery { replayed: Some("1".into()), from: form.fields.from.clone() };
            Ok(Redirect::to(&format!("/console/deliveries/{id}{}", shown.again())).into_response())
        }
        ReplayOutcome::WaitingInLane => Err(ConsoleError::BadRequest(
            "This delivery waits behind an earlier one of its ordering key; it is sent in its turn.".to_owned(),
        )),
        ReplayOutcome::NotFound => Err(ConsoleError::NotFound("delivery")),
        ReplayOutcome::NotReplayable(status) => Err(ConsoleError::BadRequest(format!(
            "This delivery is {}; only dead or failed deliveries can be replayed.",
            status.as_str()
        ))),
    }
}
