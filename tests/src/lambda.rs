//! Driving the functions the way AWS Lambda does: an API Gateway HTTP API (v2)
//! event JSON goes through lambda_http's own conversion and adapter (the code
//! `lambda_http::run` runs) into the function's app, and the v2 response JSON
//! comes back; the publisher's handler gets a scheduled or SQS event with a
//! Lambda context. The event fixtures are the repository's `events/*.json`.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_http::request::LambdaRequest;
use lambda_http::tower::ServiceExt;
use lambda_http::{Adapter, Context, LambdaEvent};
use relayops_publisher::lambda::{self, InvocationReport};
use relayops_publisher::Publisher;
use relayops_shared::api::ApiState;
use relayops_shared::config::PublisherBudgetConfig;
use relayops_shared::db::listen::PgNotifier;
use serde_json::{json, Value};

use crate::TestEnv;

/// A fixture from the repository's `events/` directory.
pub fn event_fixture(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../events").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// An API Gateway HTTP API (payload 2.0) event, as API Gateway sends it to a
/// function behind `$default` or a route.
pub fn http_api_event(method: &str, path_and_query: &str, api_key: Option<&str>, body: Option<&Value>) -> Value {
    let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
    let mut event = event_fixture("ingest-post.json");
    event["rawPath"] = json!(path);
    event["rawQueryString"] = json!(query);
    event["routeKey"] = json!("$default");
    event["requestContext"]["routeKey"] = json!("$default");
    event["requestContext"]["http"]["method"] = json!(method);
    event["requestContext"]["http"]["path"] = json!(path);
    let headers = event["headers"].as_object_mut().expect("headers");
    for fixture_only in ["authorization", "content-type", "idempotency-key"] {
        headers.remove(fixture_only);
    }
    if let Some(key) = api_key {
        headers.insert("authorization".into(), json!(format!("Bearer {key}")));
    }
    match body {
        Some(body) => {
            headers.insert("content-type".into(), json!("application/json"));
            event["body"] = json!(body.to_string());
        }
        None => event["body"] = Value::Null,
    }
    event
}

/// A v2 response: status, headers (lower-case names) and the body as JSON.
#[derive(Debug)]
pub struct LambdaAnswer {
    pub status: u16,
    pub headers: serde_json::Map<String, Value>,
    pub body: Value,
}

impl LambdaAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(Value::as_str)
    }
}

/// Runs one v2 event through lambda_http into `app` and returns the v2 response.
pub async fn invoke_http(app: &axum::Router, event: Value) -> LambdaAnswer {
    let request: LambdaRequest = serde_json::from_value(event).expect("a valid API Gateway event");
    assert!(matches!(request, LambdaRequest::ApiGatewayV2(_)), "parsed as an HTTP API (v2) event");
    let adapter = Adapter::from(app.clone());
    let response = adapter.oneshot(LambdaEvent::new(request, Context::default())).await.expect("infallible");
    let response = serde_json::to_value(&response).expect("serialisable response");
    assert!(response.get("cookies").is_some(), "a v2 response (it has `cookies`): {response}");
    let body = response["body"].as_str().map(|text| serde_json::from_str(text).unwrap_or(json!(text)));
    LambdaAnswer {
        status: response["statusCode"].as_u64().expect("statusCode") as u16,
        headers: response["headers"].as_object().cloned().unwrap_or_default(),
        body: body.unwrap_or(Value::Null),
    }
}

/// A Lambda context whose deadline is `budget` from now (as Lambda sets it).
pub fn context_with_deadline(budget: Duration) -> Context {
    let deadline = SystemTime::now() + budget;
    let mut context = Context::default();
    context.deadline = deadline.duration_since(UNIX_EPOCH).expect("after the epoch").as_millis() as u64;
    context.request_id = uuid::Uuid::new_v4().to_string();
    context
}

impl TestEnv {
    /// The state an HTTP Lambda builds from its environment, for this test's
    /// database, auth and Redis prefix (wake-ups go through Postgres NOTIFY).
    pub fn lambda_state(&self) -> ApiState {
        crate::api_state(&self.pool, &self.config).with_wakeup(std::sync::Arc::new(PgNotifier::new(self.pool.clone())))
    }

    /// A publisher as its Lambda builds one (once per container).
    pub fn lambda_publisher(&self) -> Publisher {
        Publisher::new(self.pool.clone(), self.broker.clone(), self.config.publisher.clone())
    }
}

/// One publisher Lambda invocation with `payload` and a context deadline
/// `time_left` away.
pub async fn invoke_publisher(
    publisher: &Publisher,
    budget: &PublisherBudgetConfig,
    payload: Value,
    time_left: Duration,
) -> InvocationReport {
    let event = LambdaEvent::new(payload, context_with_deadline(time_left));
    lambda::handle(publisher, budget, event).await.expect("publisher invocation")
}
