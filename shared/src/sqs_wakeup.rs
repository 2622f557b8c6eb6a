//! The publisher's fast wake-up in the AWS topology: after ingest or replay
//! commit, a small "outbox has work" message on an SQS queue whose event source
//! is the publisher Lambda. Debounced per warm container (at most one message per
//! `debounce`, 100 ms by default) so its cost stays small under load, and best
//! effort: a lost or failed message loses nothing, because the outbox is the
//! source of truth and the publisher's schedule sweeps it.
//!
//! The client is built from the standard environment without `aws-config`
//! (which would pull in STS/SSO clients): `AWS_REGION`, the
//! `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN` that Lambda
//! provides, and `AWS_ENDPOINT_URL_SQS` or `AWS_ENDPOINT_URL` for LocalStack or
//! moto. Only built with the `sqs` feature (the ingest and replay Lambdas, and
//! the worker, whose SQS destinations share `https_client`).
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use tokio::task::JoinHandle;

use crate::api::PublisherWakeup;
use crate::config::{ConfigError, WakeupQueueConfig};
use crate::debounce::Debounce;
use crate::telemetry::error_chain;

/// The body of every wake-up message; the publisher only counts them.
pub const WAKEUP_BODY: &str = r#"{"type":"outbox.wakeup.v1"}"#;

/// Sends debounced wake-up messages to one queue.
pub struct SqsWakeup {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    debounce: Debounce,
    /// The longest a response waits for its wake-up (the send timeout, plus a little).
    settle_limit: Duration,
    /// Sends not yet finished; [`settle`](Self::settle) awaits them before a
    /// Lambda response returns (a frozen container would stall them).
    in_flight: Mutex<Vec<JoinHandle<()>>>,
}

impl SqsWakeup {
    /// `send_timeout` is the client's (see [`client`]): how long a response may
    /// wait for its wake-up.
    pub fn new(client: aws_sdk_sqs::Client, queue_url: String, debounce: Duration, send_timeout: Duration) -> Self {
        Self {
            client,
            queue_url,
            debounce: Debounce::new(debounce),
            settle_limit: send_timeout + Duration::from_millis(250),
            in_flight: Mutex::new(Vec::new()),
        }
    }

    /// The wake-up configured by `RELAYOPS_WAKEUP_QUEUE_URL`, or `None` when unset.
    pub fn from_env() -> Result<Option<Arc<Self>>, ConfigError> {
        let Some(config) = WakeupQueueConfig::from_env()? else { return Ok(None) };
        let client = client_from_env(config.send_timeout);
        Ok(Some(Arc::new(Self::new(client, config.queue_url, config.debounce, config.send_timeout))))
    }

    /// Awaits the sends started so far, for at most the send timeout (then they
    /// are left to finish, or not, in the background: the schedule is the
    /// safety net).
    pub async fn settle(&self) {
        let limit = self.settle_limit;
        let pending: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.in_flight.lock().unwrap_or_else(PoisonError::into_inner));
        if pending.is_empty() {
            return;
        }
        if tokio::time::timeout(limit, futures_util::future::join_all(pending)).await.is_err() {
            tracing::warn!(limit_ms = limit.as_millis() as u64, "publisher wake-up still sending; not waiting longer");
        }
    }
}

impl PublisherWakeup for SqsWakeup {
    fn wake(&self) {
        // Only at once: a send put off to the interval's end would hold the
        // response (`settle`) or, left behind, freeze with the container.
        // A wake-up inside the interval is left to the publisher woken by the
        // previous one, or to the schedule.
        if !self.debounce.take_slot_if_due() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let send = self.client.send_message().queue_url(&self.queue_url).message_body(WAKEUP_BODY);
        let task = runtime.spawn(async move {
            if let Err(error) = send.send().await {
                // Best effort: the scheduled tick delivers what this would have hurried.
                tracing::warn!(error = %error_chain(&error), "publisher wake-up not sent");
            }
        });
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        in_flight.retain(|task| !task.is_finished());
        in_flight.push(task);
    }
}

/// An SQS client from the standard AWS environment variables (see the module doc).
pub fn client_from_env(timeout: Duration) -> aws_sdk_sqs::Client {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let region = var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION")).unwrap_or_else(|| "us-east-1".into());
    let credentials = match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => Some(Credentials::new(id, secret, var("AWS_SESSION_TOKEN"), None, "env")),
        _ => None,
    };
    client(region, credentials, var("AWS_ENDPOINT_URL_SQS").or_else(|| var("AWS_ENDPOINT_URL")), timeout)
}

/// The SDK's HTTPS client on rustls with ring (as everything else here; never
/// aws-lc).
pub fn https_client() -> aws_sdk_sqs::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https()
}

/// An SQS client with short timeouts and one retry: a wake-up is never worth
/// a slow response. `endpoint` overrides AWS's (LocalStack, moto).
pub fn client(
    region: String,
    credentials: Option<Credentials>,
    endpoint: Option<String>,
    timeout: Duration,
) -> aws_sdk_sqs::Client {
    let mut config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region))
        .http_client(https_client())
        .timeout_config(TimeoutConfig::builder().connect_timeout(timeout).operation_timeout(timeout).build())
        .retry_config(RetryConfig::standard().with_max_attempts(2));
    if let Some(credentials) = credentials {
        config = config.credentials_provider(credentials);
    }
    if let Some(endpoint) = endpoint {
        config = config.endpoint_url(endpoint);
    }
    aws_sdk_sqs::Client::from_conf(config.build())
}
