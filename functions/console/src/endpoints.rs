//! `GET /console/endpoints`: every endpoint with its health at a glance —
//! success rate and p95 latency over the last hour and day, the latest
//! attempt, enabled or disabled (with the reason), and a day of attempts by
//! outcome as a chart. Three aggregate queries for the whole page
//! (`repo::endpoint_health`), however many endpoints.
use std::collections::HashMap;

use axum::extract::State;
use axum::response::Html;
use chrono::{DateTime, Duration, DurationRound, Utc};
use maud::{html, Markup};
use relayops_shared::api::ApiState;
use relayops_shared::db::DbError;
use relayops_shared::ids::{EndpointId, TenantId};
use relayops_shared::repo::endpoint_health::{self, HealthSummary, LatestAttempt};
use relayops_shared::repo::endpoints::{self, EndpointRecord};
use relayops_shared::repo::GenericClient;

use crate::chart::{self, Series};
use crate::error::ConsoleError;
use crate::layout::{self, Section};
use crate::session::Session;

/// The most endpoints one page lists.
pub const MAX_ENDPOINTS: i64 = 500;
/// The chart: 24 hourly buckets.
const BUCKET_SECS: i64 = 3600;
const BUCKETS: usize = 24;

/// How an endpoint is doing, from its recent attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Disabled,
    /// Under half of the attempts (last hour, else last day) delivered.
    Failing,
    /// Under 95 % delivered, or the latest attempt did not deliver.
    Degraded,
    Healthy,
    /// No attempt in the last day.
    Idle,
}

impl Health {
    pub fn of(endpoint: &EndpointRecord, summary: Option<&HealthSummary>, latest: Option<&LatestAttempt>) -> Self {
        if !endpoint.enabled {
            return Self::Disabled;
        }
        let Some(summary) = summary else { return Self::Idle };
        let stats = if summary.recent.attempts > 0 { summary.recent } else { summary.window };
        match stats.success_rate() {
            None => Self::Idle,
            Some(rate) if rate < 0.5 => Self::Failing,
            Some(rate) if rate < 0.95 => Self::Degraded,
            Some(_) if latest.is_some_and(|latest| latest.outcome != "delivered") => Self::Degraded,
            Some(_) => Self::Healthy,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Failing => "failing",
            Self::Degraded => "degraded",
            Self::Healthy => "healthy",
            Self::Idle => "idle",
        }
    }

    pub fn badge(self) -> Markup {
        let class = match self {
            Self::Failing | Self::Disabled => "badge bad health",
            Self::Degraded => "badge warn health",
            Self::Healthy => "badge ok health",
            Self::Idle => "badge health",
        };
        html! { span class=(class) data-health=(self.label()) { (self.label()) } }
    }
}

/// Health data for the tenant's endpoints over the last day.
pub struct HealthData {
    pub summaries: HashMap<EndpointId, HealthSummary>,
    pub latest: HashMap<EndpointId, LatestAttempt>,
    pub series: HashMap<EndpointId, Series>,
    pub chart_start: DateTime<Utc>,
}

impl HealthData {
    pub async fn load(client: &impl GenericClient, tenant: TenantId) -> Result<Self, DbError> {
        let now = Utc::now();
        // Buckets end with the current hour, so the last bar is the one filling up.
        let current_hour = now.duration_trunc(Duration::hours(1)).unwrap_or(now);
        let chart_start = current_hour - Duration::hours(BUCKETS as i64 - 1);
        let day_ago = now - Duration::days(1);
        let summaries = endpoint_health::summaries(client, tenant, now - Duration::hours(1), day_ago).await?;
        let latest = endpoint_health::latest_attempts(client, tenant, day_ago).await?;
        let buckets = endpoint_health::outcome_buckets(client, tenant, chart_start, BUCKET_SECS).await?;
        let mut series: HashMap<EndpointId, Series> = HashMap::new();
        for bucket in buckets {
            series.entry(bucket.endpoint_id).or_insert_with(|| Series::new(chart_start, BUCKET_SECS, BUCKETS)).add(
                bucket.bucket,
                &bucket.outcome,
                bucket.attempts,
            );
        }
        Ok(Self {
            summaries: summaries.into_iter().map(|summary| (summary.endpoint_id, summary)).collect(),
            latest: latest.into_iter().map(|latest| (latest.endpoint_id, latest)).collect(),
            series,
            chart_start,
        })
    }

    pub fn health(&self, endpoint: &EndpointRecord) -> Health {
        Health::of(endpoint, self.summaries.get(&endpoint.id), self.latest.get(&endpoint.id))
    }

    pub fn chart(&self, endpoint: EndpointId) -> Markup {
        let empty = Series::new(self.chart_start, BUCKET_SECS, BUCKETS);
        let series = self.series.get(&endpoint).unwrap_or(&empty);
        chart::outcome_chart(series, "attempts by outcome, hourly, last 24 hours")
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

pub async fn list(State(state): State<ApiState>, session: Session) -> Result<Html<String>, ConsoleError> {
    let client = state.pool.get().await.map_err(DbError::from)?;
    let endpoints = endpoints::list_endpoints(&client, session.tenant(), MAX_ENDPOINTS).await?;
    let health = HealthData::load(&client, session.tenant()).await?;
    let body = html! {
        @if endpoints.is_empty() {
            p.card { "No endpoints yet. Create one through the API (" code { "POST /v1/endpoints" } ")." }
        }
        div.endpoints {
            @for endpoint in &endpoints {
                @let summary = health.summaries.get(&endpoint.id);
                @let latest = health.latest.get(&endpoint.id);
                @let state = health.health(endpoint);
                section.card.endpoint data-endpoint=(endpoint.id) data-health=(state.label()) {
                    div.endpoint-head {
                        (state.badge())
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
