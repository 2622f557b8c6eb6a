//! The load scenarios: ingest only (no subscriber), delivery to one endpoint,
//! and fan-out to several (ten unless `--fanout-endpoints` says otherwise). Events are posted by `concurrency` clients as fast as
//! the API answers; deliveries are timed from the ingest response to the
//! receiver's arrival.
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use crate::cost::{Cost, Meter};
use crate::receiver::Receiver;
use crate::stats::{percentiles, Percentiles};

#[derive(Clone)]
pub struct Target {
    pub http: reqwest::Client,
    pub api: String,
    pub key: String,
    pub receiver: Receiver,
    pub receiver_url: String,
    /// `--metrics-also`: the other processes' `/metrics` URLs (roles run as
    /// processes of their own), whose counters are added to the API's.
    pub metrics_also: Vec<String>,
}

/// An event the API stored.
pub struct Posted {
    pub id: String,
    /// When the client first sent it (before any refusal it retried).
    pub first_sent: Instant,
    /// When the answer that stored it came.
    pub answered: Instant,
    /// The answered request's own latency.
    pub latency_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct IngestFigures {
    pub events: usize,
    pub accepted: usize,
    pub events_per_sec: f64,
    pub latency: Percentiles,
    pub errors_by_status: BTreeMap<String, usize>,
    /// Refusals (503, 429) that clients retried after `Retry-After`.
    pub retried_by_status: BTreeMap<String, usize>,
}

#[derive(Debug, Serialize)]
pub struct DeliveryFigures {
    pub endpoints: usize,
    pub ingest: IngestFigures,
    pub deliveries: usize,
    pub deliveries_per_sec: f64,
    pub end_to_end: Percentiles,
    pub attempts_per_delivery: f64,
    pub complete: bool,
    /// How the events went in: `single` or `batches of N`.
    pub feed: String,
    /// From the first post until every delivery is recorded.
    pub cost: Option<Cost>,
}

impl Target {
    /// Creates `count` endpoints at the receiver subscribed to `event_type`.
    pub async fn endpoints(&self, event_type: &str, count: usize) -> anyhow::Result<()> {
        for n in 0..count {
            self.endpoint(&format!("hook/{event_type}-{n}"), event_type, 256).await?;
        }
        Ok(())
    }

    /// Creates one endpoint at the receiver's `path`; returns its id.
    pub async fn endpoint(&self, path: &str, event_type: &str, max_in_flight: u32) -> anyhow::Result<String> {
        let body = json!({
            "url": format!("{}/{path}", self.receiver_url),
            "event_types": [event_type],
            "max_in_flight": max_in_flight,
        });
        self.create_endpoint(&body).await
    }

    /// Creates an endpoint from a `POST /v1/endpoints` body; returns its id.
    pub async fn create_endpoint(&self, body: &serde_json::Value) -> anyhow::Result<String> {
        let response =
            self.http.post(format!("{}/v1/endpoints", self.api)).bearer_auth(&self.key).json(body).send().await?;
        anyhow::ensure!(response.status().as_u16() == 201, "creating an endpoint: {}", response.text().await?);
        let created: serde_json::Value = response.json().await?;
        Ok(created["id"].as_str().unwrap_or_default().to_owned())
    }

    /// Posts one event as the protocol asks (503 and 429 retried with the same
    /// idempotency key, see `protocol`). The outcome: the stored event — or
    /// the status (or "transport") that refused it; and the refusals retried.
    pub async fn post_one(&self, event_type: &str, seq: usize) -> (Result<Posted, String>, Vec<u16>) {
        self.post_one_keyed(event_type, seq, None).await
    }

    /// [`post_one`](Self::post_one) with an ordering key, if given.
    pub async fn post_one_keyed(
        &self,
        event_type: &str,
        seq: usize,
        ordering_key: Option<String>,
    ) -> (Result<Posted, String>, Vec<u16>) {
        let mut body = json!({ "event_type": event_type, "payload": { "seq": seq, "bench": true } });
        if let Some(ordering_key) = ordering_key {
            body["ordering_key"] = json!(ordering_key);
        }
        let key = crate::protocol::idempotency_key();
        let url = format!("{}/v1/events", self.api);
        let first_sent = Instant::now();
        let mut sent = first_sent;
        let outcome = crate::protocol::send(|| {
            sent = Instant::now();
            self.http.post(&url).bearer_auth(&self.key).header("idempotency-key", &key).json(&body)
        })
        .await;
        let answered = Instant::now();
        let result = match outcome.response {
            // 200: an earlier try was stored after all (its answer was lost).
            Ok(response) if matches!(response.status().as_u16(), 200 | 201) => {
                let receipt: serde_json::Value = response.json().await.unwrap_or_default();
                let id = receipt["id"].as_str().unwrap_or_default().to_owned();
                Ok(Posted { id, first_sent, answered, latency_ms: (answered - sent).as_secs_f64() * 1000.0 })
            }
            Ok(response) => Err(response.status().as_u16().to_string()),
            Err(_) => Err("transport".into()),
        };
        (result, outcome.refused)
    }

    /// Posts `events` events of `event_type` (with `keys`, event `n` gets the
    /// ordering key `k{n % keys}`); returns the figures and each accepted
    /// event's response instant.
    pub async fn ingest(
        &self,
        event_type: &str,
        events: usize,
        concurrency: usize,
        label: &str,
        keys: Option<usize>,
    ) -> (IngestFigures, HashMap<String, Instant>) {
        let next = Arc::new(AtomicUsize::new(0));
        let acked = Arc::new(Mutex::new(HashMap::with_capacity(events)));
        let latencies = Arc::new(Mutex::new(Vec::with_capacity(events)));
        let errors = Arc::new(Mutex::new(BTreeMap::new()));
        let retried = Arc::new(Mutex::new(BTreeMap::new()));
        let started = Instant::now();
        let progress = crate::progress(label, next.clone(), events, self.receiver.clone());
        let mut clients = Vec::new();
        for _ in 0..concurrency {
            let target = self.clone();
            let (next, acked, latencies, errors) = (next.clone(), acked.clone(), latencies.clone(), errors.clone());
            let retried = retried.clone();
            let event_type = event_type.to_owned();
            clients.push(tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= events {
                        break;
                    }
                    let ordering_key = keys.map(|keys| format!("k{}", n % keys.max(1)));
                    let (result, refused) = target.post_one_keyed(&event_type, n, ordering_key).await;
                    count_statuses(&retried, &refused);
                    match result {
                        Ok(posted) => {
                            latencies.lock().unwrap_or_else(|p| p.into_inner()).push(posted.latency_ms);
                            acked.lock().unwrap_or_else(|p| p.into_inner()).insert(posted.id, posted.answered);
                        }
                        Err(status) => {
                            *errors.lock().unwrap_or_else(|p| p.into_inner()).entry(status).or_insert(0) += 1;
                        }
                    }
                }
            }));
        }
        for client in clients {
            let _ = client.await;
        }
        let elapsed = started.elapsed().as_secs_f64();
        progress.abort();
        let acked = std::mem::take(&mut *acked.lock().unwrap_or_else(|p| p.into_inner()));
        let latencies = std::mem::take(&mut *latencies.lock().unwrap_or_else(|p| p.into_inner()));
        let errors = std::mem::take(&mut *errors.lock().unwrap_or_else(|p| p.into_inner()));
        let retried = std::mem::take(&mut *retried.lock().unwrap_or_else(|p| p.into_inner()));
        let figures = IngestFigures {
            events,
            accepted: acked.len(),
            events_per_sec: acked.len() as f64 / elapsed,
            latency: percentiles(latencies),
            errors_by_status: errors,
            retried_by_status: retried,
        };
        (figures, acked)
    }

    /// Posts events to `endpoints` subscribers and waits for every delivery.
    /// `feed` says how the events go in: single posts measure ingest and
    /// delivery competing for the same cores; batches take ingest's cost mostly
    /// out, so the figure is the delivery path's (publisher + worker).
    pub async fn deliver(
        &self,
        event_type: &str,
        endpoints: usize,
        events: usize,
        concurrency: usize,
        feed: Feed,
        timeout: Duration,
    ) -> anyhow::Result<DeliveryFigures> {
        self.endpoints(event_type, endpoints).await?;
        self.receiver.reset();
        let meter = Meter::start();
        let started = Instant::now();
        let (ingest, acked) = match feed {
            Feed::Single => self.ingest(event_type, events, concurrency, event_type, None).await,
            Feed::Ordered { keys } => self.ingest(event_type, events, concurrency, event_type, Some(keys)).await,
            Feed::Batches(size) => {
                let (figures, acked) = self.ingest_batches(event_type, events, size, (concurrency / 8).max(1)).await;
                let ingest = IngestFigures {
                    events,
                    accepted: figures.accepted,
                    events_per_sec: figures.events_per_sec,
                    latency: figures.batch_latency,
                    errors_by_status: BTreeMap::new(),
                    retried_by_status: figures.retried_by_status,
                };
                (ingest, acked)
            }
        };
        let expected = ingest.accepted * endpoints;
        let deadline = Instant::now() + timeout;
        while self.receiver.delivered() < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.await_recorded().await?;
        let cost = meter.finish("deliveries", self.receiver.delivered());
        let arrivals = self.receiver.arrivals.lock().map_err(|_| anyhow::anyhow!("receiver lock"))?;
        let last = arrivals.by_delivery.values().map(|(_, at, _)| *at).max().unwrap_or(started);
        let latencies: Vec<f64> = arrivals
            .by_delivery
            .values()
            .filter_map(|(event, at, _)| {
                acked.get(event).map(|ack| at.saturating_duration_since(*ack).as_secs_f64() * 1000.0)
            })
            .collect();
        let delivered = arrivals.by_delivery.len();
        Ok(DeliveryFigures {
            endpoints,
            deliveries: delivered,
            deliveries_per_sec: delivered as f64 / (last - started).as_secs_f64().max(0.001),
            end_to_end: percentiles(latencies),
            attempts_per_delivery: arrivals.requests as f64 / delivered.max(1) as f64,
            complete: delivered >= expected,
            feed: match feed {
                Feed::Single => "single".to_owned(),
                Feed::Ordered { keys } => format!("single, {keys} ordering keys"),
                Feed::Batches(size) => format!("batches of {size}"),
            },
            ingest,
            cost,
        })
    }
}

/// How a delivery scenario feeds its events in.
#[derive(Debug, Clone, Copy)]
pub enum Feed {
    /// One `POST /v1/events` per event.
    Single,
    /// `POST /v1/events/batch` with this many events each.
    Batches(usize),
    /// One `POST /v1/events` per event, with one of this many ordering keys
    /// (round robin): each key's deliveries go one at a time.
    Ordered { keys: usize },
}

#[derive(Debug, Serialize)]
pub struct BatchFigures {
    pub events: usize,
    pub batch_size: usize,
    pub accepted: usize,
    pub events_per_sec: f64,
    pub batch_latency: Percentiles,
    /// Refusals (503, 429) that clients retried after `Retry-After`.
    pub retried_by_status: BTreeMap<String, usize>,
}

/// Adds each refused status to the tally.
fn count_statuses(tally: &Mutex<BTreeMap<String, usize>>, statuses: &[u16]) {
    if statuses.is_empty() {
        return;
    }
    let mut tally = tally.lock().unwrap_or_else(|p| p.into_inner());
    for status in statuses {
        *tally.entry(status.to_string()).or_insert(0) += 1;
    }
}

impl Target {
    /// Posts `events` events in batches of `batch_size` from `concurrency`
    /// clients; returns the figures and each accepted event's response instant.
    pub async fn ingest_batches(
        &self,
        event_type: &str,
        events: usize,
        batch_size: usize,
        concurrency: usize,
    ) -> (BatchFigures, HashMap<String, Instant>) {
        let batches = events.div_ceil(batch_size);
        let next = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let acked = Arc::new(Mutex::new(HashMap::with_capacity(events)));
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let retried = Arc::new(Mutex::new(BTreeMap::new()));
        let started = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..concurrency {
            let (http, url, key) = (self.http.clone(), format!("{}/v1/events/batch", self.api), self.key.clone());
            let (next, accepted, acked, latencies) = (next.clone(), accepted.clone(), acked.clone(), latencies.clone());
            let retried = retried.clone();
            let event_type = event_type.to_owned();
            clients.push(tokio::spawn(async move {
                loop {
                    let batch = next.fetch_add(1, Ordering::Relaxed);
                    if batch >= batches {
                        break;
                    }
                    let size = batch_size.min(events - batch * batch_size);
                    let items: Vec<_> = (0..size)
                        .map(|n| {
                            json!({
                                "event_type": event_type,
                                "payload": { "batch": batch, "n": n },
                                "idempotency_key": crate::protocol::idempotency_key(),
                            })
                        })
                        .collect();
                    let body = json!({ "events": items });
                    let mut sent = Instant::now();
                    let outcome = crate::protocol::send(|| {
                        sent = Instant::now();
                        http.post(&url).bearer_auth(&key).json(&body)
                    })
                    .await;
                    let answered = Instant::now();
                    count_statuses(&retried, &outcome.refused);
                    if let Ok(response) = outcome.response {
                        let body: serde_json::Value = response.json().await.unwrap_or_default();
                        accepted.fetch_add(body["accepted"].as_u64().unwrap_or(0) as usize, Ordering::Relaxed);
                        latencies
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((answered - sent).as_secs_f64() * 1000.0);
                        let ids = body["results"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|item| item["event"]["id"].as_str());
                        let mut acked = acked.lock().unwrap_or_else(|p| p.into_inner());
                        acked.extend(ids.map(|id| (id.to_owned(), answered)));
                    }
                }
            }));
        }
        for client in clients {
            let _ = client.await;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let accepted = accepted.load(Ordering::Relaxed);
        let latencies = std::mem::take(&mut *latencies.lock().unwrap_or_else(|p| p.into_inner()));
        let acked = std::mem::take(&mut *acked.lock().unwrap_or_else(|p| p.into_inner()));
        let retried_by_status = std::mem::take(&mut *retried.lock().unwrap_or_else(|p| p.into_inner()));
        let figures = BatchFigures {
            events,
            batch_size,
            accepted,
            events_per_sec: accepted as f64 / elapsed,
            batch_latency: percentiles(latencies),
            retried_by_status,
        };
        (figures, acked)
    }
}
