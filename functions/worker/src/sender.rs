//! The outbound HTTP client: no redirects, bounded timeouts, a bounded pool per
//! host, and a cap on how much of a response body is read. Requests carry the
//! Standard Webhooks headers and `X-RelayOps-Delivery-Id`, all stable across
//! retries of one delivery except the timestamp and signature. An endpoint
//! whose destination is an SQS queue gets the same body and headers as a
//! message (`crate::sqs`).
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use relayops_shared::config::WorkerConfig;
use relayops_shared::domain::{Destination, SigningSecret};
use relayops_shared::repo::deliveries::DeliveryJob;
use relayops_shared::signing;
use relayops_shared::telemetry::error_chain;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use serde_json::{Map, Value};

use relayops_shared::net_policy::AddressPolicy;

use crate::resolver::{GuardedResolver, HostBlocked};
use crate::sqs::SqsSender;
use crate::verdict::SendResult;

const USER_AGENT: &str = concat!("RelayOps-Webhooks/", env!("CARGO_PKG_VERSION"));

#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    #[error("building the HTTP client failed")]
    Client(#[source] reqwest::Error),
    #[error("the endpoint's signing secret is invalid: {0}")]
    Secret(String),
    #[error("cannot read the receivers' CA file {path}")]
    CaFile {
        path: std::path::PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// What happened on the wire, for the attempt record.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub result: SendResult,
    pub request_headers: Value,
    pub response_body: Option<String>,
    pub error: Option<String>,
    pub latency: Duration,
}

#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    /// Endpoints whose destination is an SQS queue.
    sqs: SqsSender,
    policy: Arc<AddressPolicy>,
    default_timeout: Duration,
    body_limit: usize,
}

impl Sender {
    pub fn new(config: &WorkerConfig) -> Result<Self, SenderError> {
        let policy = Arc::new(AddressPolicy::new(config.outbound_allow.clone()));
        let mut builder = reqwest::Client::builder();
        for path in &config.outbound_ca_files {
            for certificate in ca_certificates(path)? {
                builder = builder.add_root_certificate(certificate);
            }
        }
        // The resolver pins the checked address; TLS still verifies the
        // certificate against the URL's host name, which is also the SNI sent.
        // HTTP/2 is used when the receiver offers it (ALPN).
        let client = builder
            .dns_resolver(Arc::new(GuardedResolver::new(Arc::clone(&policy))))
            .user_agent(USER_AGENT)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.connect_timeout)
            .pool_max_idle_per_host(config.pool_per_host)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(SenderError::Client)?;
        Ok(Self {
            client,
            sqs: SqsSender::new(config),
            policy,
            default_timeout: config.request_timeout,
            body_limit: config.response_body_limit,
        })
    }

    fn headers(&self, job: &DeliveryJob) -> Result<HeaderMap, SenderError> {
        let current = SigningSecret::parse(&job.secret).map_err(|error| SenderError::Secret(error.message))?;
        let previous = job.previous_secret.as_deref().and_then(|text| SigningSecret::parse(text).ok());
        let mut secrets = vec![&current];
        secrets.extend(previous.as_ref());
        let id = job.delivery_id.to_string();
        let timestamp = Utc::now().timestamp();
        let signature = signing::sign(&secrets, &id, timestamp, job.body.as_bytes());

        let mut headers = HeaderMap::new();
        let mut put = |name: &'static str, value: String| {
            // Every value here is ASCII we produced ourselves.
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        };
        put(signing::HEADER_ID, id.clone());
        put(signing::HEADER_TIMESTAMP, timestamp.to_string());
        put(signing::HEADER_SIGNATURE, signature);
        put(signing::HEADER_DELIVERY_ID, id);
        put(signing::HEADER_EVENT_ID, job.event_id.to_string());
        put(signing::HEADER_EVENT_TYPE, job.event_type.clone());
        put(signing::HEADER_ATTEMPT, job.attempt_number.to_string());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(headers)
    }

    /// Sends one attempt. Never fails: every failure is an [`Exchange`] to record.
    pub async fn send(&self, job: &DeliveryJob) -> Exchange {
        let started = Instant::now();
        let headers = match self.headers(job) {
            Ok(headers) => headers,
            Err(error) => {
                return Exchange {
                    result: SendResult::NoAnswer { timed_out: false },
                    request_headers: Value::Object(Map::new()),
                    response_body: None,
                    error: Some(error.to_string()),
                    latency: started.elapsed(),
                }
            }
        };
        let timeout = job.timeout_ms.map(|ms| Duration::from_millis(ms.max(1) as u64)).unwrap_or(self.default_timeout);
        if job.destination == Destination::AwsSqs {
            return self.sqs.send(job, &headers, timeout).await;
        }
        let request_headers = recorded_headers(&headers);
        if let Err(refusal) = self.check_ip_literal(&job.url) {
            return Exchange {
                result: SendResult::Blocked,
                request_headers,
                response_body: None,
                error: Some(refusal),
                latency: started.elapsed(),
            };
        }
        let sent = self.client.post(&job.url).headers(headers).timeout(timeout).body(job.body.clone()).send().await;
        let mut response = match sent {
            Ok(response) => response,
            Err(error) => {
                let blocked = blocked_host(&error);
                return Exchange {
                    result: if blocked {
                        SendResult::Blocked
                    } else {
                        SendResult::NoAnswer { timed_out: error.is_timeout() }
                    },
                    request_headers,
                    response_body: None,
                    error: Some(describe(&error)),
                    latency: started.elapsed(),
                };
            }
        };
        let status = response.status().as_u16();
        let retry_after = response.headers().get(RETRY_AFTER).and_then(parse_retry_after);
        let mut body = Vec::new();
        let mut body_error = None;
        while body.len() < self.body_limit {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(self.body_limit - body.len())]),
                Ok(None) => break,
                Err(error) => {
                    body_error = Some(describe(&error));
                    break;
                }
            }
        }
        Exchange {
            result: SendResult::Answered { status, retry_after },
            request_headers,
            response_body: Some(String::from_utf8_lossy(&body).into_owned()),
            error: body_error,
            latency: started.elapsed(),
        }
    }
}

impl Sender {
    /// URLs naming an IP address never reach the resolver; check them here,
    /// with their port (an allowed `address:port` opens that port only), by
    /// the same judgement the API applies when the URL is set
    /// (`AddressPolicy::check_destination`). (The URL parser has already
    /// turned decimal/octal/hex spellings into the address they mean.) A host
    /// opened by name is checked for its port.
    fn check_ip_literal(&self, url: &str) -> Result<(), String> {
        let parsed = url::Url::parse(url).map_err(|error| format!("invalid URL: {error}"))?;
        self.policy.check_destination(&parsed).map_err(|refused| refused.to_string())
    }
}

/// The certificates of a PEM file, as extra roots for receivers.
fn ca_certificates(path: &std::path::Path) -> Result<Vec<reqwest::Certificate>, SenderError> {
    let error =
        |source: Box<dyn std::error::Error + Send + Sync>| SenderError::CaFile { path: path.to_owned(), source };
    let pem = std::fs::read(path).map_err(|e| error(e.into()))?;
    let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| error(e.into()))?;
    if certificates.is_empty() {
        return Err(error("no certificate in the file".into()));
    }
    Ok(certificates)
}

/// Whether the request failed because our resolver refused every address.
fn blocked_host(error: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.downcast_ref::<HostBlocked>().is_some() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The request headers kept with the attempt; the signature is left out.
pub(crate) fn recorded_headers(headers: &HeaderMap) -> Value {
    let map: Map<String, Value> = headers
        .iter()
        .filter(|(name, _)| name.as_str() != signing::HEADER_SIGNATURE)
        .map(|(name, value)| (name.to_string(), Value::String(value.to_str().unwrap_or_default().to_owned())))
        .collect();
    Value::Object(map)
}

/// `Retry-After` as seconds or an HTTP date.
pub fn parse_retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = chrono::DateTime::parse_from_rfc2822(text).ok()?;
    let seconds = (when.with_timezone(&Utc) - Utc::now()).num_seconds().max(0) as u64;
    Some(Duration::from_secs(seconds))
}

/// What went wrong, for the attempt record. The causes only: reqwest's own
/// message names the URL, which may carry a receiver's credentials.
fn describe(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timeout"
    } else if error.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    match std::error::Error::source(error) {
        Some(cause) => format!("{kind}: {}", error_chain(cause)),
        None => kind.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_accepts_seconds_and_http_dates() {
        assert_eq!(parse_retry_after(&HeaderValue::from_static("7")), Some(Duration::from_secs(7)));
        let past = HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(parse_retry_after(&past), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(&HeaderValue::from_static("soon")), None);
    }
}
