//! `GET /console/dead-letters`: dead deliveries (the delivery log at
//! `status=dead`), each one click from its page and replay; and bulk replay of
//! every dead delivery matching the filters, in two steps — a dry run that
//! shows how many match, then the replay itself (at most 1000 per click, as
//! `POST /v1/replays`; the result says how many remain). Same repository
//! calls as the replay function (`repo::replay::count_matching` /
//! `replay_bulk`).
use axum::extract::{Query, State};
use axum::response::Html;
use maud::html;
use relayops_shared::api::ApiState;
use relayops_shared::db::DbError;
use relayops_shared::domain::DeliveryStatus;
use relayops_shared::repo::replay::{self, ReplayFilter, MAX_PER_CALL};

use crate::deliveries::{filter_form, DeliveryPage};
use crate::error::ConsoleError;
use crate::filters::DeliveryQuery;
use crate::layout::{self, csrf_field, Section};
use crate::session::{ConsoleForm, Session};

/// The view lists what bulk replay would take, so it takes no filter bulk
/// replay lacks (an ordering key: the delivery log filters by it).
fn refuse_ordering_key(query: &DeliveryQuery) -> Result<(), ConsoleError> {
    if query.ordering_key.is_empty() {
        return Ok(());
    }
    Err(ConsoleError::BadRequest(
        "ordering key: dead letters are not filtered by ordering key; use the delivery log with status dead".into(),
    ))
}

/// The dead deliveries the filters describe, as the replay repository reads them.
fn replay_filter(query: &DeliveryQuery) -> Result<ReplayFilter, ConsoleError> {
    refuse_ordering_key(query)?;
    let filter = query.filter(Some(DeliveryStatus::Dead))?;
    Ok(ReplayFilter {
        statuses: vec![DeliveryStatus::Dead],
        endpoint: filter.endpoint,
        event_type: filter.event_type.map(|event_type| event_type.as_str().to_owned()),
        since: filter.since,
        until: filter.until,
    })
}

/// The filters as hidden fields, so the next step acts on the same set.
fn hidden_filters(query: &DeliveryQuery) -> maud::Markup {
    html! {
        input type="hidden" name="endpoint" value=(query.endpoint);
        input type="hidden" name="event_type" value=(query.event_type);
        input type="hidden" name="since" value=(query.since);
        input type="hidden" name="until" value=(query.until);
    }
}

pub async fn list(
    State(state): State<ApiState>,
    session: Session,
    Query(query): Query<DeliveryQuery>,
) -> Result<Html<String>, ConsoleError> {
    refuse_ordering_key(&query)?;
    let page = DeliveryPage::load(&state.reads, &session, &query, Some(DeliveryStatus::Dead)).await?;
    let body = html! {
        p.muted { "Deliveries whose retries ran out. Open one to see every attempt, or replay them all." }
        (filter_form("/console/dead-letters", &query, &page.endpoints, false))
        @if !page.rows.is_empty() {
            form.bulk method="post" action="/console/dead-letters/replay-preview" {
                (csrf_field(&session))
                (hidden_filters(&query))
                button #bulk-preview type="submit" { "Replay all matching…" }
            }
        }
        (page.table("/console/dead-letters", &query, Some(&session)))
    };
    Ok(layout::page(&session, Section::DeadLetters, "Dead letters", body))
}

/// Step one: how many dead deliveries the filters match (nothing changes).
pub async fn preview(
    State(state): State<ApiState>,
    form: ConsoleForm<DeliveryQuery>,
) -> Result<Html<String>, ConsoleError> {
    form.session.require_admin()?;
    let filter = replay_filter(&form.fields)?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let matched = replay::count_matching(&client, form.session.tenant(), &filter).await?;
    let body = html! {
        section.card {
            p #dry-run { strong { (matched) } " dead deliveries match these filters." }
            @if matched > MAX_PER_CALL {
                p.muted { "One replay takes the oldest " (MAX_PER_CALL) "; replay again for the rest." }
            }
            @if matched > 0 {
                form method="post" action="/console/dead-letters/replay" {
                    (csrf_field(&form.session))
                    (hidden_filters(&form.fields))
                    button #bulk-confirm type="submit" { "Replay " (matched.min(MAX_PER_CALL)) " deliveries" }
                }
            }
            p { a href="/console/dead-letters" { "Cancel" } }
        }
    };
    Ok(layout::page(&form.session, Section::DeadLetters, "Replay dead letters", body))
}

/// Step two: the replay, in one transaction.
pub async fn replay(
    State(state): State<ApiState>,
    form: ConsoleForm<DeliveryQuery>,
) -> Result<Html<String>, ConsoleError> {
    form.session.require_admin()?;
    let filter = replay_filter(&form.fields)?;
    let tenant = form.session.tenant();
    let (matched, replayed) = replay::replay_bulk(&state.pool, tenant, &filter, MAX_PER_CALL).await?;
    if !replayed.is_empty() {
        state.wake_publisher();
    }
    tracing::info!(tenant_id = %tenant, replayed = replayed.len(), "bulk replay in the console");
    let remaining = (matched - replayed.len() as i64).max(0);
    let body = html! {
        section.card {
            p #replayed { strong { (replayed.len()) } " deliveries are back in line." }
            @if remaining > 0 { p { (remaining) " more match; replay again to send them." } }
            p { a href="/console/deliveries" { "Follow them in the delivery log" } }
        }
    };
    Ok(layout::page(&form.session, Section::DeadLetters, "Replayed", body))
}
