//! Amazon SQS destinations: one `SendMessage` per attempt to the queue an
//! endpoint names. The body is the payload exactly as a webhook's, and the
//! webhook's headers travel as string message attributes (`webhook-id` — the
//! stable delivery id —, `webhook-timestamp`, `webhook-signature` over the
//! body, `x-relayops-*`), so a consumer verifies origin as a webhook receiver
//! does. A FIFO queue's message is grouped by the event's ordering key (the
//! delivery id when it has none) and deduplicated by the delivery id, so a
//! retry after a lost answer is dropped by SQS for its five-minute window.
//!
//! Calls go to the queue's region's service endpoint, never to the host the
//! URL names (an override exists for tests and local runs only), signed with
//! the worker's own identity from the standard environment. The SDK does not
//! retry: each call is one recorded attempt, and the worker's retry policy,
//! circuits and dead letters apply as to webhooks. Error codes are classified
//! by [`retryable_code`].
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_sdk_sqs::types::MessageAttributeValue;
use relayops_shared::config::WorkerConfig;
use relayops_shared::domain::SqsQueueUrl;
use relayops_shared::repo::deliveries::DeliveryJob;
use relayops_shared::telemetry::error_chain;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use serde_json::json;

use crate::sender::Exchange;
use crate::verdict::SendResult;

/// The longest any SQS call may take; each attempt has its endpoint's
/// (shorter) timeout besides.
const CALL_LIMIT: Duration = Duration::from_secs(60);

/// Sends to SQS queues, with one client per region.
#[derive(Clone)]
pub struct SqsSender {
    clients: Arc<Mutex<HashMap<String, aws_sdk_sqs::Client>>>,
    credentials: Option<Credentials>,
    endpoint_override: Option<String>,
    connect_timeout: Duration,
}

impl SqsSender {
    pub fn new(config: &WorkerConfig) -> Self {
        let credentials = config.aws_keys.as_ref().map(|keys| {
            Credentials::new(
                &keys.access_key_id,
                &keys.secret_access_key,
                keys.session_token.clone(),
                None,
                "relayops-worker",
            )
        });
        Self {
            clients: Arc::default(),
            credentials,
            endpoint_override: config.aws_destination_endpoint.clone(),
            connect_timeout: config.connect_timeout,
        }
    }

    fn client(&self, region: &str) -> Option<aws_sdk_sqs::Client> {
        let credentials = self.credentials.clone()?;
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let client = clients.entry(region.to_owned()).or_insert_with(|| {
            let mut config = aws_sdk_sqs::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new(region.to_owned()))
                .http_client(relayops_shared::sqs_wakeup::https_client())
                .credentials_provider(credentials)
                .timeout_config(
                    TimeoutConfig::builder()
                        .connect_timeout(self.connect_timeout)
                        .operation_timeout(CALL_LIMIT)
                        .build(),
                )
                .retry_config(RetryConfig::disabled());
            if let Some(endpoint) = &self.endpoint_override {
                config = config.endpoint_url(endpoint);
            }
            aws_sdk_sqs::Client::from_conf(config.build())
        });
        Some(client.clone())
    }

    /// One `SendMessage` of `job` with the webhook's `headers` as attributes.
    /// Never fails: every failure is an [`Exchange`] to record.
    pub async fn send(&self, job: &DeliveryJob, headers: &HeaderMap, timeout: Duration) -> Exchange {
        let started = Instant::now();
        let request_headers = crate::sender::recorded_headers(headers);
        let failed = |result: SendResult, error: String| Exchange {
            result,
            request_headers: request_headers.clone(),
            response_body: None,
            error: Some(error),
            latency: started.elapsed(),
        };
        // Checked when the endpoint was set; a row changed by hand is refused.
        let queue = match SqsQueueUrl::parse(&job.url) {
            Ok(queue) => queue,
            Err(error) => return failed(SendResult::Blocked, format!("aws_sqs: {}", error.message)),
        };
        let Some(client) = self.client(queue.region()) else {
            return failed(
                SendResult::NoAnswer { timed_out: false },
                "aws_sqs: no AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set)".into(),
            );
        };
        let mut request = client.send_message().queue_url(queue.as_str()).message_body(&job.body);
        for (name, value) in headers.iter().filter(|(name, _)| *name != CONTENT_TYPE) {
            let value = value.to_str().unwrap_or_default();
            if let Ok(attribute) = MessageAttributeValue::builder().data_type("String").string_value(value).build() {
                request = request.message_attributes(name.as_str(), attribute);
            }
        }
        if queue.is_fifo() {
            let group = job.ordering_key.clone().unwrap_or_else(|| job.delivery_id.to_string());
            request = request.message_group_id(group).message_deduplication_id(job.delivery_id.to_string());
        }
        let sent = match tokio::time::timeout(timeout, request.send()).await {
            Ok(sent) => sent,
            Err(_) => return failed(SendResult::NoAnswer { timed_out: true }, "aws_sqs: timeout".into()),
        };
        match sent {
            Ok(output) => Exchange {
                result: SendResult::Answered { status: 200, retry_after: None },
                request_headers,
                response_body: Some(
                    json!({ "message_id": output.message_id(), "sequence_number": output.sequence_number() })
                        .to_string(),
                ),
                error: None,
                latency: started.elapsed(),
            },
            Err(error) => {
                let (result, described) = outcome_of(&error);
                failed(result, described)
            }
        }
    }
}

/// What a failed `SendMessage` comes to, and its description for the
/// attempt record.
fn outcome_of(error: &SdkError<SendMessageError, HttpResponse>) -> (SendResult, String) {
    match error {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            let code = error.code().unwrap_or("Unknown");
            let message = error.message().unwrap_or_default();
            let retryable = status >= 500 || retryable_code(code);
            (SendResult::ServiceError { status, retryable }, format!("aws_sqs: {code}: {message}"))
        }
        SdkError::TimeoutError(_) => (SendResult::NoAnswer { timed_out: true }, "aws_sqs: timeout".into()),
        other => (SendResult::NoAnswer { timed_out: false }, format!("aws_sqs: {}", error_chain(other))),
    }
}

/// Error codes that say "not now" although their status is a 4xx: throttling
/// (SQS's own, or KMS's for an encrypted queue) and credentials or a
/// signature that expired on the way. Every other 4xx code — access denied,
/// no such queue, a message SQS will not take — is final; a 5xx is retried.
pub fn retryable_code(code: &str) -> bool {
    matches!(
        code,
        "ThrottlingException"
            | "RequestThrottled"
            | "AWS.SimpleQueueService.RequestThrottled"
            | "KmsThrottled"
            | "KMS.ThrottlingException"
            | "RequestLimitExceeded"
            | "ServiceUnavailable"
            | "ExpiredToken"
            | "RequestExpired"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_and_expired_credentials_are_retried_and_refusals_are_not() {
        for code in ["ThrottlingException", "RequestThrottled", "KmsThrottled", "ExpiredToken"] {
            assert!(retryable_code(code), "{code}");
        }
        for code in ["AccessDenied", "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "KmsDisabled"] {
            assert!(!retryable_code(code), "{code}");
        }
    }
}
