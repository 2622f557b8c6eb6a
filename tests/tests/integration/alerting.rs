//! Dead-letter alerting against a real loopback alert receiver: one alert per
//! failing endpoint per cool-down, the held-back count in the next alert, an
//! alert retried until the receiver accepts it, and the operators' DLQ left
//! untouched.
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use relayops_alerter::Alerter;
use relayops_shared::config::AlertConfig;
use relayops_tests::{eventually, TestEnv, WAIT};
use serde_json::{json, Value};

/// Answers 503 to the first `refusals` alerts, 200 after; records everything.
#[derive(Clone, Default)]
struct AlertReceiver {
    seen: Arc<Mutex<Vec<(u16, Value)>>>,
    refusals: Arc<AtomicU32>,
}

impl AlertReceiver {
    async fn start(refusals: u32) -> (Self, url::Url) {
        let receiver = Self { refusals: Arc::new(AtomicU32::new(refusals)), ..Default::default() };
        let app = axum::Router::new().route("/alerts", axum::routing::post(receive)).with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/alerts", listener.local_addr().unwrap()).parse().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, url)
    }

    fn seen(&self) -> Vec<(u16, Value)> {
        self.seen.lock().unwrap().clone()
    }

    fn accepted(&self) -> Vec<Value> {
        self.seen().into_iter().filter(|(status, _)| *status == 200).map(|(_, alert)| alert).collect()
    }
}

async fn receive(State(receiver): State<AlertReceiver>, Json(alert): Json<Value>) -> StatusCode {
    let refuse = receiver.refusals.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
    let status = if refuse { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    receiver.seen.lock().unwrap().push((status.as_u16(), alert));
    status
}

fn alert_counter(result: &str) -> f64 {
    let text = relayops_shared::observe::render();
    let prefix = format!("relayops_dead_letter_alerts_total{{result=\"{result}\"}} ");
    text.lines().find_map(|line| line.strip_prefix(&prefix)).map_or(0.0, |value| value.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_alert_once_per_endpoint_per_cooldown_and_only_accepted_alerts_are_acked() {
    let env = TestEnv::start().await;
    let (receiver, url) = AlertReceiver::start(1).await;
    let cooldown = Duration::from_secs(6);
    let config = AlertConfig {
        webhook_url: url,
        cooldown,
        timeout: Duration::from_secs(2),
        retry_pause: Duration::from_millis(200),
    };
    let alerter = Alerter::new(env.broker.clone(), config).unwrap();
    let mut consuming = alerter.consuming();
    let _alerter = tokio::spawn(async move { alerter.run().await });
    tokio::time::timeout(WAIT, consuming.wait_for(|consuming| *consuming)).await.unwrap().unwrap();

    let failing = json!({ "max_attempts": 1 });
    let a = env.create_endpoint("/sim/status/500", &["a.*"], failing.clone()).await["id"].clone();
    let b = env.create_endpoint("/sim/status/500", &["b.*"], failing).await["id"].clone();
    let marker = format!("payload-marker-{}", uuid::Uuid::new_v4().simple());
    for n in 0..3 {
        assert_eq!(env.post_event("a.x", json!({ "n": n, "marker": marker })).await.status, 201);
    }
    assert_eq!(env.post_event("b.x", json!({ "marker": marker })).await.status, 201);
    env.wait_for_sql("four dead deliveries", "SELECT count(*) = 4 FROM relayops.deliveries WHERE status = 'dead'")
        .await;

    // Four dead letters: one alert per endpoint, two held back by A's cool-down.
    eventually(WAIT, || async {
        let (sent, suppressed) = (alert_counter("sent"), alert_counter("suppressed"));
        if sent + suppressed == 4.0 {
            Ok(())
        } else {
            Err(format!("{sent} sent, {suppressed} suppressed; receiver saw {:?}", receiver.seen()))
        }
    })
    .await;
    let a_alerted_by = Instant::now();
    let accepted = receiver.accepted();
    assert_eq!(accepted.len(), 2, "{accepted:?}");
    let endpoints: std::collections::HashSet<&Value> = accepted.iter().map(|alert| &alert["endpoint_id"]).collect();
    assert_eq!(endpoints, [&a, &b].into_iter().collect(), "one alert per endpoint");
    assert_eq!(alert_counter("suppressed"), 2.0);
    for alert in &accepted {
        assert_eq!(alert["alert"], "dead_letter");
        assert_eq!(alert["attempts"], 1);
        assert_eq!(alert["last_http_status"], 500);
        assert_eq!(alert["suppressed_since_last_alert"], 0);
        assert!(alert["text"].as_str().unwrap().contains(alert["delivery_id"].as_str().unwrap()));
    }
    // The refused alert was not acked: it came again and was accepted.
    let seen = receiver.seen();
    let refused: Vec<&Value> = seen.iter().filter(|(status, _)| *status == 503).map(|(_, alert)| alert).collect();
    assert_eq!(refused.len(), 1);
    assert!(accepted.iter().any(|alert| alert["delivery_id"] == refused[0]["delivery_id"]), "retried until accepted");
    assert!(seen.iter().all(|(_, alert)| !alert.to_string().contains(&marker)), "no payloads in alerts");
    // The alerter has its own queue: the operators' DLQ still holds every letter.
    assert_eq!(env.queue_depth(&env.topology().alert_queue()).await, 0, "every alert-queue message acked");
    assert_eq!(env.take_dead_letters().await.len(), 4, "the operators' DLQ is untouched");

    // After the cool-down, A's next alert reports what was held back.
    tokio::time::sleep((a_alerted_by + cooldown).saturating_duration_since(Instant::now())).await;
    assert_eq!(env.post_event("a.x", json!({ "n": "after" })).await.status, 201);
    let summary = eventually(WAIT, || async {
        match receiver.accepted().get(2) {
            Some(alert) => Ok(alert.clone()),
            None => Err(format!("no third alert: {:?}", receiver.seen())),
        }
    })
    .await;
    assert_eq!(summary["endpoint_id"], a);
    assert_eq!(summary["suppressed_since_last_alert"], 2, "{summary}");
    assert!(summary["text"].as_str().unwrap().contains("plus 2 more"), "{summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_alerter_role_runs_on_its_own_with_readiness_and_metrics() {
    let env = TestEnv::start().await;
    let (receiver, url) = AlertReceiver::start(0).await;
    let ops = relayops_tests::free_loopback_address();
    let _alerter = env.spawn_role(
        "alerter",
        &[("RELAYOPS_ALERT_WEBHOOK_URL", url.as_str()), ("RELAYOPS_WORKER_HEALTH_LISTEN", ops.as_str())],
    );
    let (http, ops) = (reqwest::Client::new(), format!("http://{ops}"));
    // Ready means consuming its queue, so no dead letter can slip past it.
    relayops_tests::wait_until_ready(&http, &ops).await;
    let ready: Value = http.get(format!("{ops}/health/ready")).send().await.unwrap().json().await.unwrap();
    assert_eq!(ready["rabbitmq"]["alerter"], "ok", "{ready}");

    let endpoint = env.create_endpoint("/sim/status/500", &["*"], json!({ "max_attempts": 1 })).await;
    assert_eq!(env.post_event("a.b", json!({})).await.status, 201);
    let alert =
        eventually(WAIT, || async { receiver.accepted().first().cloned().ok_or("no alert yet".to_owned()) }).await;
    assert_eq!(alert["endpoint_id"], endpoint["id"]);
    let metrics = http.get(format!("{ops}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("relayops_dead_letter_alerts_total{result=\"sent\"} 1"), "{metrics}");
}
