//! Ordering-lane tests' receiver and checks. [`LaneReceiver`] is a real HTTP
//! receiver on loopback that records each request the moment it has read it
//! (before answering), with the payload's `key` and `n` (the event's position
//! among its key's events, as the test posted them), and when the exchange
//! ended (answered, or dropped by the sender), and answers as the test's rule
//! says. [`order_violations`] is the property the lanes promise.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

use crate::{eventually, send_following_protocol, Answer, TestEnv};

/// One request as the receiver read it.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub key: String,
    pub n: i64,
    pub delivery_id: String,
    /// The how-many-th request of this delivery id it is (1: the first).
    pub seen: u32,
    /// What the receiver answered (`None`: it never did).
    pub answered: Option<u16>,
    /// When the receiver read it.
    pub at: Instant,
    /// When the exchange ended: answered, or the sender dropped the
    /// connection (`None`: still open).
    pub ended: Option<Instant>,
}

/// What the receiver does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Status(u16),
    /// Never answers (the worker times out or dies first).
    Hang,
    /// That status after that many milliseconds.
    Slow(u16, u64),
}

type Rule = dyn Fn(&Arrival) -> Reply + Send + Sync;

#[derive(Clone)]
pub struct LaneReceiver {
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    rule: Arc<Rule>,
}

impl LaneReceiver {
    /// Starts a receiver answering by `rule`; returns it and its URL.
    pub async fn start(rule: impl Fn(&Arrival) -> Reply + Send + Sync + 'static) -> (Self, String) {
        let receiver = Self { arrivals: Arc::default(), rule: Arc::new(rule) };
        let router = Router::new().route("/hook", post(receive)).with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let address = listener.local_addr().expect("local address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        (receiver, format!("http://{address}/hook"))
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Waits until the arrivals satisfy `done`; returns them.
    pub async fn wait_until(&self, limit: Duration, done: impl Fn(&[Arrival]) -> bool) -> Vec<Arrival> {
        eventually(limit, || async {
            let arrivals = self.arrivals();
            if done(&arrivals) {
                Ok(arrivals)
            } else {
                Err(format!("the receiver's arrivals never got there ({} so far)", arrivals.len()))
            }
        })
        .await
    }
}

async fn receive(State(receiver): State<LaneReceiver>, headers: HeaderMap, body: Bytes) -> Response {
    let payload: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let delivery_id = headers.get("webhook-id").and_then(|value| value.to_str().ok()).unwrap_or_default().to_owned();
    let (reply, index) = {
        let mut arrivals = receiver.arrivals.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let index = arrivals.len();
        let seen = arrivals.iter().filter(|a| a.delivery_id == delivery_id).count() as u32 + 1;
        let mut arrival = Arrival {
            key: payload["key"].as_str().unwrap_or_default().to_owned(),
            n: payload["n"].as_i64().unwrap_or(-1),
            delivery_id,
            seen,
            answered: None,
            at: Instant::now(),
            ended: None,
        };
        let reply = (receiver.rule)(&arrival);
        if let Reply::Status(code) | Reply::Slow(code, _) = reply {
            arrival.answered = Some(code);
        }
        arrivals.push(arrival);
        (reply, index)
    };
    // Stamps the end when the handler finishes or is dropped (the server
    // drops it when the sender closes the connection).
    let _ended = EndStamp { arrivals: receiver.arrivals.clone(), index };
    match reply {
        Reply::Status(code) => StatusCode::from_u16(code).unwrap_or(StatusCode::OK).into_response(),
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::OK.into_response()
        }
        Reply::Slow(code, ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            StatusCode::from_u16(code).unwrap_or(StatusCode::OK).into_response()
        }
    }
}

/// A rule: the first request of position 0 gets `first`; every other
/// request is answered 200.
pub fn first_request_of_position_0(first: Reply) -> impl Fn(&Arrival) -> Reply + Send + Sync + 'static {
    move |arrival| if arrival.n == 0 && arrival.seen == 1 { first } else { Reply::Status(200) }
}

/// Sets an arrival's `ended` when dropped.
struct EndStamp {
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    index: usize,
}

impl Drop for EndStamp {
    fn drop(&mut self) {
        let mut arrivals = self.arrivals.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(arrival) = arrivals.get_mut(self.index) {
            arrival.ended = Some(Instant::now());
        }
    }
}

/// The lanes' promise, checked on what a receiver read: per key, the
/// positions arrive in order — a position may repeat (at least once: a retry,
/// a duplicate) but never arrive after a later one of its key has. One line
/// per violation.
pub fn order_violations(arrivals: &[Arrival]) -> Vec<String> {
    let mut latest: HashMap<&str, i64> = HashMap::new();
    let mut violations = Vec::new();
    for (index, arrival) in arrivals.iter().enumerate() {
        let latest = latest.entry(&arrival.key).or_insert(i64::MIN);
        if arrival.n < *latest {
            violations
                .push(format!("arrival {index}: key {} position {} after position {}", arrival.key, arrival.n, latest));
        }
        *latest = (*latest).max(arrival.n);
    }
    violations
}

/// How many distinct (key, position) were answered 2xx.
pub fn accepted_count(arrivals: &[Arrival]) -> usize {
    let accepted = arrivals.iter().filter(|a| a.answered.is_some_and(|code| (200..300).contains(&code)));
    accepted.map(|a| (a.key.as_str(), a.n)).collect::<std::collections::HashSet<_>>().len()
}

/// Per key, the positions in the order they arrived, repeats in a row
/// collapsed (a retry of the same event).
pub fn received_positions(arrivals: &[Arrival]) -> HashMap<String, Vec<i64>> {
    let mut positions: HashMap<String, Vec<i64>> = HashMap::new();
    for arrival in arrivals {
        let seen = positions.entry(arrival.key.clone()).or_default();
        if seen.last() != Some(&arrival.n) {
            seen.push(arrival.n);
        }
    }
    positions
}

impl LaneReceiver {
    /// Waits (up to `limit`) until `keys` × `per_key` distinct events were
    /// accepted, then asserts the lanes' promise on what arrived: no position
    /// after a later one of its key, and every key's positions 0..`per_key`
    /// in order. Returns the arrivals.
    pub async fn assert_every_key_complete_in_order(&self, limit: Duration, keys: i64, per_key: i64) -> Vec<Arrival> {
        let total = (keys * per_key) as usize;
        let arrivals = self.wait_until(limit, |arrivals| accepted_count(arrivals) == total).await;
        let violations = order_violations(&arrivals);
        assert!(violations.is_empty(), "{} out-of-order arrivals: {violations:#?}", violations.len());
        let expected: Vec<i64> = (0..per_key).collect();
        for (key, positions) in received_positions(&arrivals) {
            assert_eq!(positions, expected, "key {key}: every event, in order");
        }
        arrivals
    }
}

impl TestEnv {
    /// Posts an event with an ordering key, following the protocol (its own
    /// `Idempotency-Key`, refusals retried).
    pub async fn post_ordered(&self, event_type: &str, payload: Value, ordering_key: &str) -> Answer {
        let body = json!({ "event_type": event_type, "payload": payload, "ordering_key": ordering_key });
        let key = format!("test-{}", uuid::Uuid::new_v4().simple());
        let url = format!("{}/v1/events", self.api_url);
        send_following_protocol(|| {
            self.http.post(&url).bearer_auth(&self.api_key).header("idempotency-key", &key).json(&body)
        })
        .await
        .answer
    }

    /// Creates an endpoint at `url` (a [`LaneReceiver`]) for every event type.
    pub async fn create_lane_endpoint(&self, url: &str, extra: Value) -> Value {
        let mut body = json!({ "url": url, "event_types": ["*"] });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let answer = self.post("/v1/endpoints", body).await;
        assert_eq!(answer.status, 201, "endpoint creation failed: {:?}", answer.body);
        answer.body
    }
}

/// A lane held on its dead first delivery (see [`TestEnv::block_a_lane`]).
pub struct BlockedLane {
    pub receiver: LaneReceiver,
    pub endpoint_id: String,
    /// The events of the key, in posting order.
    pub events: Vec<String>,
    /// The first event's delivery: dead, holding the lane.
    pub dead_delivery: String,
}

impl TestEnv {
    /// Posts `count` events of `key` to a new [`LaneReceiver`] whose endpoint
    /// allows one attempt and blocks its lanes on dead letters; the receiver
    /// fails the first request of position 0 (only), so that delivery dies and
    /// holds the lane with `count - 1` waiting behind it. Returns once it is dead.
    pub async fn block_a_lane(&self, key: &str, count: i64) -> BlockedLane {
        let (receiver, url) = LaneReceiver::start(first_request_of_position_0(Reply::Status(500))).await;
        let endpoint = self.create_lane_endpoint(&url, json!({ "max_attempts": 1, "dead_letter_lane": "block" })).await;
        let mut events = Vec::new();
        for n in 0..count {
            let answer = self.post_ordered("order.updated", json!({ "key": key, "n": n }), key).await;
            assert_eq!(answer.status, 201, "{:?}", answer.body);
            events.push(answer.body["id"].as_str().expect("event id").to_owned());
        }
        let dead = self.wait_for_status(&events[0], "dead").await;
        BlockedLane {
            receiver,
            endpoint_id: endpoint["id"].as_str().expect("endpoint id").to_owned(),
            events,
            dead_delivery: dead["id"].as_str().expect("delivery id").to_owned(),
        }
    }
}
