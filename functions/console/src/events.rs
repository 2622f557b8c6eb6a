//! `GET /console/events`: the events the tenant posted, newest first, by type
//! and time, with cursor paging (`repo::event_queries::list_events`); and one
//! event with its payload and the deliveries it fanned out to.
use axum::extract::{Path, Query, State};
use axum::response::Html;
use maud::html;
use relayops_shared::api::{page_of, parse_path_id, ApiState};
use relayops_shared::db::DbError;
use relayops_shared::ids::EventId;
use relayops_shared::repo::delivery_queries::TimeKey;
use relayops_shared::repo::event_queries::{self, EventFilter};
use relayops_shared::repo::{deliveries, events};
use serde::Deserialize;

use crate::error::ConsoleError;
use crate::filters::{self, PAGE_SIZE};
use crate::layout::{self, Section};
use crate::session::Session;

#[derive(Debug, Default, Deserialize)]
pub struct EventQuery {
    #[serde(default)]
    event_type: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    #[serde(default)]
    cursor: String,
}

impl EventQuery {
    fn with_cursor(&self, cursor: &str) -> String {
        let mut query = String::new();
        for (key, value) in [("event_type", &self.event_type), ("since", &self.since), ("until", &self.until)] {
            if !value.trim().is_empty() {
                query.push_str(&format!("{key}={}&", filters::encode(value.trim())));
            }
        }
        query + "cursor=" + &filters::encode(cursor)
    }
}

pub async fn list(
    State(state): State<ApiState>,
    session: Session,
    Query(query): Query<EventQuery>,
) -> Result<Html<String>, ConsoleError> {
    let filter = EventFilter {
        event_type: filters::event_type(&query.event_type)?,
        ordering_key: None,
        since: filters::time("since", &query.since)?,
        until: filters::time("until", &query.until)?,
    };
    let after = filters::decode_cursor(&query.cursor)?;
    let rows = relayops_shared::read_may_lag!(state.reads, |client| event_queries::list_events(
        &*client,
        session.tenant(),
        &filter,
        after,
        PAGE_SIZE + 1
    )
    .await?);
    let (rows, more) = page_of(rows, PAGE_SIZE);
    let next = rows
        .last()
        .filter(|_| more)
        .map(|last| filters::encode_cursor(TimeKey { at: last.received_at, id: last.id.as_uuid() }));
    let body = html! {
        form.filters method="get" action="/console/events" {
            label { "Event type" input type="text" name="event_type" value=(query.event_type) placeholder="order.created"; }
            label { "From (UTC)" input type="datetime-local" name="since" value=(query.since); }
            label { "To (UTC)" input type="datetime-local" name="until" value=(query.until); }
            button type="submit" { "Filter" }
        }
        @if rows.is_empty() { p.card.muted { "No events match." } }
        @else {
            div.scroll {
                table {
                    thead { tr { th { "Event" } th { "Type" } th { "Idempotency key" } th { "Received (UTC)" } } }
                    tbody {
                        @for event in &rows {
                            tr {
                                td { a.id href=(format!("/console/events/{}", event.id)) { (event.id) } }
                                td { code { (event.event_type) } }
                                td { (event.idempotency_key.as_deref().unwrap_or("")) }
                                td { (layout::time(event.received_at)) }
                            }
                        }
                    }
                }
            }
        }
        nav.pager {
            @if !query.cursor.trim().is_empty() { a href="/console/events" { "« Newest" } }
            @if let Some(next) = &next { a.next href=(format!("/console/events?{}", query.with_cursor(next))) { "Older »" } }
        }
    };
    Ok(layout::page(&session, Section::Events, "Events", body))
}

pub async fn show(
    State(state): State<ApiState>,
    session: Session,
    Path(event_id): Path<String>,
) -> Result<Html<String>, ConsoleError> {
    let id: EventId = parse_path_id(&event_id).map_err(|_| ConsoleError::NotFound("event"))?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let event = events::get_event(&client, session.tenant(), id).await?.ok_or(ConsoleError::NotFound("event"))?;
    let fanned_out = deliveries::list_for_event(&client, session.tenant(), id).await?;
    let body = html! {
        section.card {
            dl.pairs {
                dt { "Event" } dd { code.id { (event.id) } }
                dt { "Type" } dd { code { (event.event_type) } }
                @if let Some(key) = &event.idempotency_key { dt { "Idempotency key" } dd { (key) } }
                @if let Some(key) = &event.ordering_key { dt { "Ordering key" } dd { code { (key) } } }
                dt { "Received" } dd { (layout::time(event.received_at)) }
            }
        }
        section.card {
            h2 { "Deliveries" }
            @if fanned_out.is_empty() { p.muted { "No endpoint was subscribed to this type when it arrived." } }
            ul {
                @for delivery in &fanned_out {
                    li {
                        a.id href=(format!("/console/deliveries/{}", delivery.id)) { (delivery.id) } " "
                        (layout::status_badge(&delivery.status))
                    }
                }
            }
        }
        section.card {
            h2 { "Payload" }
            pre.payload { (pretty_json(&event.payload)) }
        }
    };
    Ok(layout::page(&session, Section::Events, "Event", body))
}

/// Indents JSON text for reading without parsing it (its numbers may not fit
/// an `f64`): breaks after `{`, `[` and `,`, outside strings. The result is
/// still text, escaped when rendered like every other value.
pub fn pretty_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                if matches!(chars.peek(), Some('}' | ']')) {
                    continue;
                }
                depth += 1;
                newline(&mut out, depth);
            }
            '}' | ']' => {
                if !matches!(out.chars().last(), Some('{' | '[')) {
                    depth = depth.saturating_sub(1);
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::pretty_json;

    #[test]
    fn json_is_indented_without_touching_strings_or_numbers() {
        let text = r#"{"a": [1, 2], "b": {"c": "x, {y}: \"z\""}, "big": 123456789012345678901234567890, "e": {}}"#;
        let pretty = pretty_json(text);
        assert!(pretty.contains("\"x, {y}: \\\"z\\\"\""), "{pretty}");
        assert!(pretty.contains("123456789012345678901234567890"));
        assert!(pretty.contains("\"e\": {}"), "{pretty}");
        let reparsed: serde_json::Value = serde_json::from_str(&pretty).unwrap();
        let original: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(reparsed, original);
    }
}
