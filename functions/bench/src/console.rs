//! The console scenario: a tenant with about `deliveries` deliveries (two
//! endpoints at the bench's receiver, and one whose every attempt fails with
//! one attempt allowed, so a third of them are dead letters), then each
//! console page requested `rounds` times in a row through a signed-in session.
//! Times are measured by the client on loopback (keep-alive), so they bound
//! the server's time from above.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use relayops_shared::db::Pool;

use crate::scenarios::Target;
use crate::stats::{percentiles, Percentiles};

const EVENT_TYPE: &str = "bench.console";

#[derive(Debug, Serialize)]
pub struct ConsoleFigures {
    pub deliveries: usize,
    pub rounds: usize,
    /// Page (route template) → request latency.
    pub pages: BTreeMap<String, Percentiles>,
    pub slowest_p95_ms: f64,
}

pub struct ConsoleRun<'a> {
    pub target: &'a Target,
    pub pool: &'a Pool,
    pub email: &'a str,
    pub password: &'a str,
    pub deliveries: usize,
    pub rounds: usize,
    pub timeout: Duration,
}

/// The text between `start` and the next `end` after it.
fn between<'t>(text: &'t str, start: &str, end: &str) -> Option<&'t str> {
    let from = text.find(start)? + start.len();
    text[from..].split(end).next()
}

impl ConsoleRun<'_> {
    pub async fn run(&self) -> anyhow::Result<ConsoleFigures> {
        let target = self.target;
        let ok = target.endpoint("hook/console-a", EVENT_TYPE, 256).await?;
        target.endpoint("hook/console-b", EVENT_TYPE, 256).await?;
        let failing = self.failing_endpoint().await?;
        let events = self.deliveries.div_ceil(3);
        eprintln!("[console] {events} events to 3 endpoints (one always failing)");
        let (figures, _) = target.ingest_batches(EVENT_TYPE, events, 500, 4).await;
        self.wait_until_settled(&failing, figures.accepted).await?;
        // Statistics as autovacuum would have them a minute later: timing
        // pages on a table that grew 10k rows since its last ANALYZE measures
        // the planner's guesses, not the pages (seen: 3x slower, 5 s stalls).
        self.pool
            .get()
            .await?
            .batch_execute("ANALYZE relayops.deliveries, relayops.delivery_attempts, relayops.events")
            .await?;

        let session = self.sign_in().await?;
        let get = |path: String| {
            let request = target.http.get(format!("{}{path}", target.api)).header("cookie", &session);
            async move {
                let started = Instant::now();
                let response = request.send().await?;
                let status = response.status();
                let body = response.text().await?;
                anyhow::ensure!(status.is_success(), "{path}: {status}");
                Ok::<_, anyhow::Error>((started.elapsed().as_secs_f64() * 1000.0, body))
            }
        };
        let (_, log) = get("/console/deliveries".into()).await?;
        let older = between(&log, "/console/deliveries?cursor=", "\"").unwrap_or_default().to_owned();
        let (_, dead) = get("/console/dead-letters".into()).await?;
        let dead_delivery = between(&dead, "href=\"/console/deliveries/dlv_", "\"").unwrap_or_default().to_owned();
        let (_, event_list) = get("/console/events".into()).await?;
        let event = between(&event_list, "href=\"/console/events/evt_", "\"").unwrap_or_default().to_owned();
        let pages = [
            ("/console/endpoints", "/console/endpoints".to_owned()),
            ("/console/endpoints/{id}", format!("/console/endpoints/{ok}")),
            ("/console/deliveries", "/console/deliveries".to_owned()),
            ("/console/deliveries (page 2)", format!("/console/deliveries?cursor={older}")),
            ("/console/deliveries?status&endpoint", format!("/console/deliveries?status=delivered&endpoint={ok}")),
            ("/console/deliveries?event_type", format!("/console/deliveries?event_type={EVENT_TYPE}")),
            ("/console/deliveries/{id}", format!("/console/deliveries/dlv_{dead_delivery}")),
            ("/console/dead-letters", "/console/dead-letters".to_owned()),
            ("/console/events", "/console/events".to_owned()),
            ("/console/events/{id}", format!("/console/events/evt_{event}")),
            ("/console/api-keys", "/console/api-keys".to_owned()),
        ];
        let mut figures = BTreeMap::new();
        for (name, path) in pages {
            get(path.clone()).await?; // warm-up: connection and statement cache
            let mut samples = Vec::with_capacity(self.rounds);
            for _ in 0..self.rounds {
                samples.push(get(path.clone()).await?.0);
            }
            figures.insert(name.to_owned(), percentiles(samples));
        }
        let slowest_p95_ms = figures.values().map(|p| p.p95_ms).fold(0.0, f64::max);
        Ok(ConsoleFigures { deliveries: events * 3, rounds: self.rounds, pages: figures, slowest_p95_ms })
    }

    /// An endpoint on a loopback port where nothing listens, one attempt allowed.
    async fn failing_endpoint(&self) -> anyhow::Result<String> {
        let body = serde_json::json!({
            "url": "http://127.0.0.1:9/closed", "event_types": [EVENT_TYPE], "max_attempts": 1,
        });
        self.target.create_endpoint(&body).await
    }

    /// Until the receiver has two deliveries per event and the failing
    /// endpoint's deliveries are all dead (its stats, through the API).
    async fn wait_until_settled(&self, failing: &str, events: usize) -> anyhow::Result<()> {
        let target = self.target;
        let deadline = Instant::now() + self.timeout;
        loop {
            let stats: Value = target
                .http
                .get(format!("{}/v1/endpoints/{failing}/stats", target.api))
                .bearer_auth(&target.key)
                .send()
                .await?
                .json()
                .await?;
            let dead = stats["by_status"]["dead"].as_u64().unwrap_or(0) as usize;
            let delivered = target.receiver.delivered_to("console");
            eprintln!("[console] delivered {delivered}/{}, dead {dead}/{events}", events * 2);
            if delivered >= events * 2 && dead >= events {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the console scenario's deliveries did not settle");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Signs in with the console's form; returns the `Cookie` header to send.
    async fn sign_in(&self) -> anyhow::Result<String> {
        let target = self.target;
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
        let url = format!("{}/console/login", target.api);
        let form = http.get(&url).send().await?;
        let cookie = |response: &reqwest::Response, name: &str| {
            response
                .headers()
                .get_all("set-cookie")
                .iter()
                .filter_map(|value| value.to_str().ok())
                .find_map(|value| value.strip_prefix(&format!("{name}=")))
                .and_then(|rest| rest.split(';').next())
                .map(str::to_owned)
        };
        let login_cookie = cookie(&form, "relayops_login_csrf").unwrap_or_default();
        let page = form.text().await?;
        let token = between(&page, "name=\"csrf\" value=\"", "\"").unwrap_or_default().to_owned();
        let answer = http
            .post(&url)
            .header("cookie", format!("relayops_login_csrf={login_cookie}"))
            .form(&[("csrf", token.as_str()), ("email", self.email), ("password", self.password)])
            .send()
            .await?;
        let session = cookie(&answer, "relayops_session");
        anyhow::ensure!(session.is_some(), "console sign-in failed: {}", answer.status());
        Ok(format!("relayops_session={}", session.unwrap_or_default()))
    }
}
