//! One endpoint: its health, its blocked ordering lanes with a Skip button
//! each ([`crate::lanes`]), subscriptions, limits and retry policy, its
//! deliveries by status; forms to enable/disable it (through the PATCH's own
//! path, so switching it emits the same operational event) and to rotate its signing
//! secret (the new secret is shown once, the old one keeps signing beside it
//! for a day, as `POST /v1/endpoints/{id}/secret/rotate` does by default).
use axum::extract::{Path, Query, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::html;
use relayops_shared::api::{parse_path_id, ApiState};
use relayops_shared::db::DbError;
use relayops_shared::domain::{DeadLetterLane, Destination, SigningSecret, SqsQueueUrl};
use relayops_shared::ids::EndpointId;
use relayops_shared::repo::endpoints::EndpointRecord;
use relayops_shared::repo::{delivery_queries, endpoints};
use serde::Deserialize;

use crate::endpoints::{latest_text, legend, HealthData};
use crate::error::ConsoleError;
use crate::lanes::BlockedLanes;
use crate::layout::{self, csrf_field, Section};
use crate::session::{ConsoleForm, NoFields, Session};

fn parse_endpoint_id(text: &str) -> Result<EndpointId, ConsoleError> {
    parse_path_id(text).map_err(|_| ConsoleError::NotFound("endpoint"))
}

fn or_default<T: std::fmt::Display>(value: Option<T>, default: &str) -> String {
    value.map(|value| value.to_string()).unwrap_or_else(|| default.to_owned())
}

#[derive(Deserialize)]
pub struct ShowQuery {
    /// Set after a skip (`crate::lanes::skip`) sent the browser back here.
    #[serde(default)]
    skipped: Option<String>,
}

pub async fn show(
    State(state): State<ApiState>,
    session: Session,
    Path(endpoint_id): Path<String>,
    Query(query): Query<ShowQuery>,
) -> Result<Html<String>, ConsoleError> {
    let id = parse_endpoint_id(&endpoint_id)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let endpoint =
        endpoints::get_endpoint(&client, session.tenant(), id).await?.ok_or(ConsoleError::NotFound("endpoint"))?;
    let subscriptions = endpoints::list_subscriptions(&client, session.tenant(), id).await?;
    let counts = delivery_queries::count_by_status(&client, session.tenant(), id, None, None).await?;
    let health = HealthData::load(&client, session.tenant(), Some(id)).await?;
    let summary = health.get(id);
    let blocked = BlockedLanes::load(&client, &session, id).await?;
    let schedule = endpoint
        .retry_schedule_secs
        .as_ref()
        .map(|secs| secs.iter().map(|s| format!("{s} s")).collect::<Vec<_>>().join(", "));
    let body = html! {
        @if query.skipped.is_some() {
            p.notice #skipped { "Skipped: the lane went on past its dead delivery, and the next delivery of its key is on its way." }
        }
        section.card {
            div.endpoint-head {
                (health.health(&endpoint).badge())
                (crate::endpoints::destination_label(endpoint.destination))
                span.url { (endpoint.url) }
            }
            @if !endpoint.description.is_empty() { p.muted { (endpoint.description) } }
            @if !endpoint.enabled {
                p.reason { "Disabled: " (endpoint.disabled_reason.as_deref().unwrap_or("disabled")) }
            }
            dl.stats {
                div { dt { "Success, 1 h" } dd { (layout::percent(summary.and_then(|s| s.recent.success_rate()))) } }
                div { dt { "Success, 24 h" } dd { (layout::percent(summary.and_then(|s| s.window.success_rate()))) } }
                div { dt { "p95, 1 h" } dd { (layout::millis(summary.and_then(|s| s.recent.p95_latency_ms))) } }
                div { dt { "p95, 24 h" } dd { (layout::millis(summary.and_then(|s| s.window.p95_latency_ms))) } }
                div { dt { "Last attempt" } dd { (latest_text(summary.map(|s| &s.latest))) } }
            }
            (health.chart(id))
            (legend())
            div.actions {
                form method="post" action=(format!("/console/endpoints/{id}/enabled")) {
                    (csrf_field(&session))
                    @if endpoint.enabled {
                        input type="hidden" name="enabled" value="false";
                        button.danger type="submit" { "Disable endpoint" }
                    } @else {
                        input type="hidden" name="enabled" value="true";
                        button type="submit" { "Enable endpoint" }
                    }
                }
                form method="post" action=(format!("/console/endpoints/{id}/rotate-secret")) {
                    (csrf_field(&session))
                    button type="submit" { "Rotate signing secret" }
                }
                a.button href=(format!("/console/deliveries?endpoint={id}")) { "Deliveries" }
                a.button href=(format!("/console/dead-letters?endpoint={id}")) { "Dead letters" }
            }
        }
        (blocked.card(&session, &endpoint))
        div.columns {
            section.card {
                h2 { "Subscriptions" }
                @if subscriptions.is_empty() { p.muted { "None: this endpoint receives no events." } }
                ul { @for subscription in &subscriptions { li { code { (subscription.event_type_pattern) } } } }
            }
            section.card {
                h2 { "Limits and retry policy" }
                dl.pairs {
                    dt { "Destination" } dd { (destination_text(&endpoint)) }
                    dt { "Rate limit" } dd { (or_default(endpoint.rate_limit_per_sec.map(|r| format!("{r}/s")), "platform default")) }
                    dt { "Burst" } dd { (or_default(endpoint.rate_limit_burst, "platform default")) }
                    dt { "Requests in flight" } dd { (or_default(endpoint.max_in_flight, "platform default")) }
                    dt { "Attempts" } dd { (or_default(endpoint.max_attempts, "platform default")) }
                    dt { "Timeout" } dd { (or_default(endpoint.timeout_ms.map(|t| format!("{t} ms")), "platform default")) }
                    dt { "Retry schedule" } dd { (schedule.unwrap_or_else(|| "platform default (exponential)".into())) }
                    dt { "Dead letter in an ordering lane" } dd {
                        @match endpoint.dead_letter_lane {
                            DeadLetterLane::Release => "the lane goes on",
                            DeadLetterLane::Block => "the lane waits for a replay or a skip",
                        }
                    }
                }
            }
            section.card {
                h2 { "Deliveries by status" }
                @if counts.is_empty() { p.muted { "No deliveries yet." } }
                dl.pairs {
                    @for (status, count) in &counts {
                        dt { (layout::status_badge(status.as_str())) }
                        dd { a href=(format!("/console/deliveries?endpoint={id}&status={}", status.as_str())) { (count) } }
                    }
                }
            }
        }
    };
    Ok(layout::page(&session, Section::Endpoints, "Endpoint", body))
}

#[derive(Deserialize)]
pub struct EnabledFields {
    enabled: String,
}

/// Enables or disables the endpoint (re-enabling clears the reason).
pub async fn set_enabled(
    State(state): State<ApiState>,
    Path(endpoint_id): Path<String>,
    form: ConsoleForm<EnabledFields>,
) -> Result<Response, ConsoleError> {
    form.session.require_admin()?;
    let id = parse_endpoint_id(&endpoint_id)?;
    let enabled = match form.fields.enabled.as_str() {
        "true" => true,
        "false" => false,
        _ => return Err(ConsoleError::BadRequest("enabled: must be true or false".into())),
    };
    let changes = endpoints::EndpointChanges { enabled: Some(enabled), ..Default::default() };
    relayops_shared::api::endpoint_changes::apply_changes(&state, form.session.tenant(), id, &changes)
        .await?
        .ok_or(ConsoleError::NotFound("endpoint"))?;
    tracing::info!(tenant_id = %form.session.tenant(), endpoint_id = %id, enabled, "endpoint changed in the console");
    Ok(Redirect::to(&format!("/console/endpoints/{id}")).into_response())
}

/// A new signing secret, shown once on the page this answers with.
pub async fn rotate_secret(
    State(state): State<ApiState>,
    Path(endpoint_id): Path<String>,
    form: ConsoleForm<NoFields>,
) -> Result<Html<String>, ConsoleError> {
    form.session.require_admin()?;
    let id = parse_endpoint_id(&endpoint_id)?;
    let secret = SigningSecret::generate();
    let client = state.pool.get().await.map_err(DbError::from)?;
    if !endpoints::rotate_secret(
        &client,
        form.session.tenant(),
        id,
        &secret,
        relayops_shared::api::endpoint_changes::DEFAULT_GRACE_SECS,
    )
    .await?
    {
        return Err(ConsoleError::NotFound("endpoint"));
    }
    tracing::info!(tenant_id = %form.session.tenant(), endpoint_id = %id, "endpoint secret rotated in the console");
    let body = html! {
        section.card {
            p { "The endpoint now signs with this secret. Copy it now: it is not shown again here." }
            pre.secret { (secret.expose()) }
            p.muted { "The previous secret keeps signing beside it for 24 hours, so your receiver can switch without rejecting anything." }
            p { a href=(format!("/console/endpoints/{id}")) { "Back to the endpoint" } }
        }
    };
    Ok(layout::page(&form.session, Section::Endpoints, "New signing secret", body))
}

/// How the endpoint's deliveries leave, in words.
fn destination_text(endpoint: &EndpointRecord) -> String {
    match endpoint.destination {
        Destination::Webhook => "webhook: a signed HTTP POST to the URL".into(),
        Destination::AwsSqs => match SqsQueueUrl::parse(&endpoint.url) {
            Ok(queue) if queue.is_fifo() => format!("Amazon SQS FIFO queue in {}", queue.region()),
            Ok(queue) => format!("Amazon SQS queue in {}", queue.region()),
            Err(_) => "Amazon SQS queue".into(),
        },
    }
}
