//! `GET /console/endpoints`: every endpoint with its health at a glance —
//! success rate and p95 latency over the last hour and day, the latest
//! attempt, enabled or disabled (with the reason), and a day of attempts by
//! outcome as a chart — worst first (or newest, or by URL), filtered by
//! health with a count per state, so the failing few of hundreds are on
//! top. One aggregate statement for the whole page (`repo::endpoint_stats`),
//! however many endpoints.
use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::Html;
use chrono::{DateTime, Duration, DurationRound, Utc};
use maud::{html, Markup};
use relayops_shared::api::ApiState;
use relayops_shared::db::DbError;
use relayops_shared::domain::Destination;
use relayops_shared::ids::{EndpointId, TenantId};
use relayops_shared::repo::endpoint_stats::{self, EndpointHealth, HealthWindows, LatestAttempt};
use relayops_shared::repo::endpoints::{self, EndpointRecord};
use relayops_shared::repo::GenericClient;
use serde::Deserialize;

use crate::chart::{self, Series};
use crate::error::ConsoleError;
use crate::layout::{self, Section};
use crate::session::Session;

/// The most endpoints one page lists.
pub const MAX_ENDPOINTS: i64 = 500;
/// The chart: 24 hourly buckets.
const BUCKET_SECS: i64 = 3600;
const BUCKETS: usize = 24;

/// How an endpoint is doing, from its recent attempts; in the order the
/// list shows them (worst first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Health {
    /// Under half of the attempts (last hour, else last day) delivered, the
    /// latest one too.
    Failing,
    /// Under 95 % delivered, or the latest attempt did not deliver.
    Degraded,
    /// Under half delivered, but the latest attempt did: it works again (a
    /// replay went through, the receiver is back), and the rate catches up
    /// as the failures leave the window.
    Recovering,
    Disabled,
    Healthy,
    /// No attempt in the last day.
    Idle,
}

const EVERY_HEALTH: [Health; 6] =
    [Health::Failing, Health::Degraded, Health::Recovering, Health::Disabled, Health::Healthy, Health::Idle];

impl Health {
    pub fn of(endpoint: &EndpointRecord, health: Option<&EndpointHealth>) -> Self {
        if !endpoint.enabled {
            return Self::Disabled;
        }
        let Some(health) = health else { return Self::Idle };
        let stats = if health.recent.attempts > 0 { health.recent } else { health.window };
        let latest_delivered = health.latest.outcome == "delivered";
        match stats.success_rate() {
            None => Self::Idle,
            Some(rate) if rate < 0.5 && latest_delivered => Self::Recovering,
            Some(rate) if rate < 0.5 => Self::Failing,
            Some(rate) if rate < 0.95 => Self::Degraded,
            Some(_) if !latest_delivered => Self::Degraded,
            Some(_) => Self::Healthy,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Failing => "failing",
            Self::Degraded => "degraded",
            Self::Recovering => "recovering",
            Self::Healthy => "healthy",
            Self::Idle => "idle",
        }
    }

    pub fn badge(self) -> Markup {
        let class = match self {
            Self::Failing | Self::Disabled => "badge bad health",
            Self::Degraded | Self::Recovering => "badge warn health",
            Self::Healthy => "badge ok health",
            Self::Idle => "badge health",
        };
        html! { span class=(class) data-health=(self.label()) { (self.label()) } }
    }
}

/// Health of the tenant's endpoints (or one) over the last day.
pub struct HealthData {
    pub by_endpoint: HashMap<EndpointId, EndpointHealth>,
    pub chart_start: DateTime<Utc>,
}

impl HealthData {
    pub async fn load(
        client: &impl GenericClient,
        tenant: TenantId,
        endpoint: Option<EndpointId>,
    ) -> Result<Self, DbError> {
        let now = Utc::now();
        // Buckets end with the current hour, so the last bar is the one filling up.
        let current_hour = now.duration_trunc(Duration::hours(1)).unwrap_or(now);
        let chart_start = current_hour - Duration::hours(BUCKETS as i64 - 1);
        let windows = HealthWindows {
            recent_since: now - Duration::hours(1),
            window_since: now - Duration::days(1),
            chart_start,
            bucket_secs: BUCKET_SECS,
        };
        let rows = endpoint_stats::load(client, tenant, windows, endpoint).await?;
        Ok(Self { by_endpoint: rows.into_iter().map(|row| (row.endpoint_id, row)).collect(), chart_start })
    }

    pub fn get(&self, endpoint: EndpointId) -> Option<&EndpointHealth> {
        self.by_endpoint.get(&endpoint)
    }

    pub fn health(&self, endpoint: &EndpointRecord) -> Health {
        Health::of(endpoint, self.get(endpoint.id))
    }

    pub fn chart(&self, endpoint: EndpointId) -> Markup {
        let mut series = Series::new(self.chart_start, BUCKET_SECS, BUCKETS);
        for bucket in self.get(endpoint).map(|health| health.buckets.as_slice()).unwrap_or_default() {
            series.add(bucket.bucket, &bucket.outcome, bucket.attempts);
        }
        chart::outcome_chart(&series, "attempts by outcome, hourly, last 24 hours")
    }
}

/// The latest attempt in a few words.
pub fn latest_text(latest: Option<&LatestAttempt>) -> Markup {
    match latest {
        None => html! { span.muted { "no attempt today" } },
        Some(latest) => html! {
            (layout::status_badge(&latest.outcome))
            " "
            @if let Some(status) = latest.http_status { "HTTP " (status) " " }
            span.muted { (layout::age(latest.started_at)) }
        },
    }
}

/// The list's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sort {
    /// Worst health first, then by URL.
    #[default]
    Health,
    /// Newest first.
    Newest,
    Url,
}

const SORTS: [(Sort, &str, &str); 3] =
    [(Sort::Health, "health", "worst first"), (Sort::Newest, "newest", "newest"), (Sort::Url, "url", "URL")];

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    /// Only endpoints in this health (its label), if given.
    #[serde(default)]
    health: Option<String>,
    #[serde(default)]
    sort: Sort,
}

impl ListQuery {
    fn shown(&self) -> Result<Option<Health>, ConsoleError> {
        match self.health.as_deref().map(str::trim).filter(|label| !label.is_empty()) {
            None => Ok(None),
            Some(label) => EVERY_HEALTH.into_iter().find(|health| health.label() == label).map(Some).ok_or_else(|| {
                ConsoleError::BadRequest(format!(
                    "health: must be one of {}",
                    EVERY_HEALTH.map(Health::label).join(", ")
                ))
            }),
        }
    }

    fn sort_label(&self) -> &'static str {
        SORTS.iter().find(|(sort, _, _)| *sort == self.sort).map(|(_, label, _)| *label).unwrap_or("health")
    }
}

/// Links to each health (with how many endpoints are in it) and each order.
fn toolbar(counts: &[(Health, usize)], total: usize, query: &ListQuery, shown: Option<Health>) -> Markup {
    let sort = query.sort_label();
    let health_param = shown.map(|health| format!("&health={}", health.label())).unwrap_or_default();
    html! {
        nav.toolbar {
            span.muted { "Show " }
            a href=(format!("/console/endpoints?sort={sort}")) class=[shown.is_none().then_some("current")] { "all (" (total) ")" }
            @for (health, count) in counts {
                @if *count > 0 {
                    " · "
                    a href=(format!("/console/endpoints?sort={sort}&health={}", health.label()))
                        class=[(shown == Some(*health)).then_some("current")] data-filter=(health.label()) {
                        (health.label()) " (" (count) ")"
                    }
                }
            }
            span.muted { " — sort " }
            @for (index, (order, label, text)) in SORTS.iter().enumerate() {
                @if index > 0 { " · " }
                a href=(format!("/console/endpoints?sort={label}{health_param}")) class=[(*order == query.sort).then_some("current")] { (text) }
            }
        }
    }
}

pub async fn list(
    State(state): State<ApiState>,
    session: Session,
    Query(query): Query<ListQuery>,
) -> Result<Html<String>, ConsoleError> {
    let shown = query.shown()?;
    let client = state.pool.get().await.map_err(DbError::from)?;
    let all = endpoints::list_endpoints(&client, session.tenant(), MAX_ENDPOINTS).await?;
    let health = HealthData::load(&client, session.tenant(), None).await?;
    let mut rated: Vec<(Health, &EndpointRecord)> =
        all.iter().map(|endpoint| (health.health(endpoint), endpoint)).collect();
    let counts: Vec<(Health, usize)> =
        EVERY_HEALTH.iter().map(|state| (*state, rated.iter().filter(|(rated, _)| rated == state).count())).collect();
    rated.retain(|(state, _)| shown.is_none_or(|shown| *state == shown));
    match query.sort {
        Sort::Health => rated.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.url.cmp(&b.1.url))),
        Sort::Newest => rated.sort_by_key(|(_, endpoint)| std::cmp::Reverse(endpoint.created_at)),
        Sort::Url => rated.sort_by(|a, b| a.1.url.cmp(&b.1.url)),
    }
    let body = html! {
        @if all.is_empty() {
            p.card { "No endpoints yet. Create one through the API (" code { "POST /v1/endpoints" } ")." }
        } @else {
            (toolbar(&counts, all.len(), &query, shown))
        }
        @if !all.is_empty() && rated.is_empty() { p.card.muted { "No endpoint is in that state." } }
        div.endpoints {
            @for (state, endpoint) in &rated {
                @let summary = health.get(endpoint.id);
                @let latest = summary.map(|s| &s.latest);
                section.card.endpoint data-endpoint=(endpoint.id) data-health=(state.label()) {
                    div.endpoint-head {
                        (state.badge())
                        (destination_label(endpoint.destination))
                        a.url href=(format!("/console/endpoints/{}", endpoint.id)) { (endpoint.url) }
                    }
                    @if !endpoint.description.is_empty() { p.muted { (endpoint.description) } }
                    @if let Some(reason) = &endpoint.disabled_reason {
                        @if !endpoint.enabled { p.reason { "Disabled: " (reason) } }
                    }
                    dl.stats {
                        div { dt { "Success, 1 h" } dd { (layout::percent(summary.and_then(|s| s.recent.success_rate()))) } }
                        div { dt { "Success, 24 h" } dd { (layout::percent(summary.and_then(|s| s.window.success_rate()))) } }
                        div { dt { "p95, 1 h" } dd { (layout::millis(summary.and_then(|s| s.recent.p95_latency_ms))) } }
                        div { dt { "p95, 24 h" } dd { (layout::millis(summary.and_then(|s| s.window.p95_latency_ms))) } }
                        div { dt { "Attempts, 24 h" } dd { (summary.map(|s| s.window.attempts).unwrap_or(0)) } }
                        div { dt { "Last attempt" } dd { (latest_text(latest)) } }
                    }
                    (health.chart(endpoint.id))
                }
            }
        }
        (legend())
    };
    Ok(layout::page(&session, Section::Endpoints, "Endpoints", body))
}

/// What the chart colours mean.
pub fn legend() -> Markup {
    html! {
        p.legend {
            span.key.delivered {} "delivered " span.key.retry {} "retried " span.key.failed {} "failed or dead"
            span.muted { " · hourly, last 24 h, UTC" }
        }
    }
}

/// A tag for endpoints that are not webhooks (nothing for a webhook).
pub(crate) fn destination_label(destination: Destination) -> Markup {
    html! {
        @if destination == Destination::AwsSqs { span.badge title="Delivered as messages to an Amazon SQS queue" { "SQS" } }
    }
}
