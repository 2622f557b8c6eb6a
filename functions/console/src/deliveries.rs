//! `GET /console/deliveries`: the delivery log, newest first, filtered by
//! status, endpoint, event type, ordering key and time, a page of 50 at a time with a
//! keyset cursor (`repo::delivery_queries::list_deliveries`, as
//! `GET /v1/deliveries` uses).
use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::Html;
use maud::{html, Markup};
use relayops_shared::api::{page_of, ApiState};
use relayops_shared::db::{DbError, Reads};
use relayops_shared::domain::DeliveryStatus;
use relayops_shared::ids::{EndpointId, EventId};
use relayops_shared::repo::deliveries::DeliveryRecord;
use relayops_shared::repo::delivery_queries::{self, DeliveryFilter, TimeKey};
use relayops_shared::repo::endpoints::{self, EndpointRecord};
use relayops_shared::repo::events;
use relayops_shared::repo::GenericClient;

use crate::delivery_page::FROM_DEAD_LETTERS;
use crate::endpoints::MAX_ENDPOINTS;
use crate::error::ConsoleError;
use crate::filters::{self, DeliveryQuery, PAGE_SIZE};
use crate::layout::{self, Section};
use crate::session::Session;

const STATUSES: [&str; 7] = ["pending", "in_progress", "scheduled", "parked", "delivered", "failed", "dead"];

/// A page of deliveries for the filters, and the cursor of the next page.
pub struct DeliveryPage {
    pub rows: Vec<DeliveryRecord>,
    pub next: Option<String>,
    pub endpoints: Vec<EndpointRecord>,
    /// The rows' event types.
    event_types: HashMap<EventId, String>,
}

impl DeliveryPage {
    /// The page `query` asks for (its filter and cursor checked first, then
    /// read as a list that may lag: from the reader when there is one).
    pub async fn load(
        reads: &Reads,
        session: &Session,
        query: &DeliveryQuery,
        status: Option<DeliveryStatus>,
    ) -> Result<Self, ConsoleError> {
        let filter = query.filter(status)?;
        let after = filters::decode_cursor(&query.cursor)?;
        Ok(relayops_shared::read_may_lag!(reads, |client| Self::read(&*client, session, &filter, after).await?))
    }

    async fn read(
        client: &impl GenericClient,
        session: &Session,
        filter: &DeliveryFilter,
        after: Option<TimeKey>,
    ) -> Result<Self, DbError> {
        let rows = delivery_queries::list_deliveries(client, session.tenant(), filter, after, PAGE_SIZE + 1).await?;
        let (rows, more) = page_of(rows, PAGE_SIZE);
        let next = rows
            .last()
            .filter(|_| more)
            .map(|last| filters::encode_cursor(TimeKey { at: last.created_at, id: last.id.as_uuid() }));
        let endpoints = endpoints::list_endpoints(client, session.tenant(), MAX_ENDPOINTS).await?;
        let event_ids: Vec<EventId> = rows.iter().map(|row| row.event_id).collect();
        let event_types = events::event_types(client, session.tenant(), &event_ids).await?;
        Ok(Self { rows, next, endpoints, event_types })
    }

    fn urls(&self) -> HashMap<EndpointId, &str> {
        self.endpoints.iter().map(|endpoint| (endpoint.id, endpoint.url.as_str())).collect()
    }

    /// The table of deliveries and the link to the next page; with a session,
    /// dead and failed rows get a replay button. A delivery opened from the
    /// dead letters keeps that section highlighted.
    pub fn table(&self, base: &str, query: &DeliveryQuery, replay: Option<&Session>) -> Markup {
        let urls = self.urls();
        let from_dead_letters = base == "/console/dead-letters";
        let from = if from_dead_letters { format!("?from={FROM_DEAD_LETTERS}") } else { String::new() };
        html! {
            @if self.rows.is_empty() { p.card.muted { "No deliveries match." } }
            @else {
                div.scroll {
                    table.deliveries {
                        thead { tr { th { "Delivery" } th { "Status" } th { "Event type" } th { "Endpoint" } th { "Ordering key" } th { "Attempts" } th { "Last HTTP" } th { "Last error" } th { "Created (UTC)" } @if replay.is_some() { th {} } } }
                        tbody {
                            @for row in &self.rows {
                                tr data-delivery=(row.id) {
                                    td { a.id href=(format!("/console/deliveries/{}{from}", row.id)) { (row.id) } }
                                    td { (layout::status_badge(&row.status)) }
                                    td.event-type { @if let Some(event_type) = self.event_types.get(&row.event_id) { code { (event_type) } } }
                                    td.url { (urls.get(&row.endpoint_id).copied().unwrap_or("(deleted endpoint)")) }
                                    td.key { @if let Some(key) = &row.ordering_key { code { (key) } } }
                                    td.num { (row.attempt_count) }
                                    td.num { (row.last_http_status.map(|s| s.to_string()).unwrap_or_default()) }
                                    td.error { (row.last_error.as_deref().unwrap_or("")) }
                                    td { (layout::time(row.created_at)) }
                                    @if let Some(session) = replay {
                                        td {
                                            @if matches!(row.status.as_str(), "dead" | "failed") {
                                                form method="post" action=(format!("/console/deliveries/{}/replay", row.id)) {
                                                    (layout::csrf_field(session))
                                                    @if from_dead_letters { input type="hidden" name="from" value=(FROM_DEAD_LETTERS); }
                                                    button.replay type="submit" { "Replay" }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            nav.pager {
                @if !query.cursor.trim().is_empty() { a href=(base) { "« Newest" } }
                @if let Some(next) = &self.next {
                    a.next href=(format!("{base}?{}", query.with_cursor(next))) { "Older »" }
                }
            }
        }
    }
}

/// The filter form; `statuses` is false where the page fixes the status
/// (the dead-letter view, whose bulk replay does not filter by ordering key:
/// it has no ordering-key field either).
pub fn filter_form(action: &str, query: &DeliveryQuery, endpoints: &[EndpointRecord], statuses: bool) -> Markup {
    html! {
        form.filters method="get" action=(action) {
            @if statuses {
                label { "Status"
                    select name="status" {
                        option value="" { "any" }
                        @for status in STATUSES {
                            option value=(status) selected[query.status == status] { (status.replace('_', " ")) }
                        }
                    }
                }
            }
            label { "Endpoint"
                select name="endpoint" {
                    option value="" { "any" }
                    @for endpoint in endpoints {
                        @let id = endpoint.id.to_string();
                        option value=(id) selected[query.endpoint == id] { (endpoint.url) }
                    }
                }
            }
            label { "Event type" input type="text" name="event_type" value=(query.event_type) placeholder="order.created"; }
            @if statuses {
                label { "Ordering key" input type="text" name="ordering_key" value=(query.ordering_key) placeholder="order-1001"; }
            }
            label { "From (UTC)" input type="datetime-local" name="since" value=(query.since); }
            label { "To (UTC)" input type="datetime-local" name="until" value=(query.until); }
            button type="submit" { "Filter" }
        }
    }
}

pub async fn list(
    State(state): State<ApiState>,
    session: Session,
    Query(query): Query<DeliveryQuery>,
) -> Result<Html<String>, ConsoleError> {
    let page = DeliveryPage::load(&state.reads, &session, &query, None).await?;
    let body = html! {
        (filter_form("/console/deliveries", &query, &page.endpoints, true))
        (page.table("/console/deliveries", &query, Some(&session)))
    };
    Ok(layout::page(&session, Section::Deliveries, "Deliveries", body))
}
