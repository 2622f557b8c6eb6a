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
//! the worker's own identity from the standard environment, or with the
//! credentials of the endpoint's role in its owner's account
//! (`crate::aws_role`). The SDK does not
//! retry: each call is one recorded attempt, and the worker's retry policy,
//! circuits and dead letters apply as to webhooks. Error codes are classified
//! by [`retryable_code`].
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::MessageAttributeValue;
use relayops_shared::config::WorkerConfig;
use relayops_shared::domain::SqsQueueUrl;
use relayops_shared::repo::deliveries::DeliveryJob;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use serde_json::json;

use crate::aws_identity::{outcome_of, OwnIdentity, Refusal};
use crate::aws_role::AssumedRoles;
use crate::sender::Exchange;
use crate::verdict::SendResult;

/// The longest any SQS call may take; each attempt has its endpoint's
/// (shorter) timeout besides.
const CALL_LIMIT: Duration = Duration::from_secs(60);

/// Sends to SQS queues, with one client per region.
#[derive(Clone)]
pub struct SqsSender {
    clients: Arc<Mutex<HashMap<String, aws_sdk_sqs::Client>>>,
    /// The worker's own identity.
    own: Arc<OwnIdentity>,
    /// Endpoints' roles in their owners' accounts, assumed.
    roles: Arc<AssumedRoles>,
    endpoint_override: Option<String>,
    connect_timeout: Duration,
}

impl SqsSender {
    pub fn new(config: &WorkerConfig) -> Self {
        let own = Arc::new(OwnIdentity::new(config.aws_identity.clone()));
        Self {
            clients: Arc::default(),
            roles: Arc::new(AssumedRoles::new(
                Arc::clone(&own),
                config.aws_destination_endpoint.clone(),
                config.connect_timeout,
            )),
            own,
            endpoint_override: config.aws_destination_endpoint.clone(),
            connect_timeout: config.connect_timeout,
        }
    }

    /// The region's client; each call is given its credentials.
    fn client(&self, region: &str) -> aws_sdk_sqs::Client {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let client = clients.entry(region.to_owned()).or_insert_with(|| {
            let mut config = aws_sdk_sqs::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new(region.to_owned()))
                .http_client(relayops_shared::sqs_wakeup::https_client())
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
        client.clone()
    }

    /// The credentials `job`'s call is signed with: its endpoint's role,
    /// assumed, or the worker's own identity.
    async fn credentials_for(
        &self,
        job: &DeliveryJob,
        region: &str,
        timeout: Duration,
    ) -> Result<Credentials, Refusal> {
        match &job.aws_role_arn {
            Some(role) => self.roles.credentials(region, role, &job.tenant_id.to_string(), timeout).await,
            None => self.own.credentials().await,
        }
    }

    /// Drops the credentials `job`'s call was signed with (they expired before
    /// their time: revoked, or a clock apart), so its retry gets fresh ones.
    async fn forget_credentials(&self, job: &DeliveryJob) {
        match &job.aws_role_arn {
            Some(role) => self.roles.forget(role, &job.tenant_id.to_string()).await,
            None => self.own.forget().await,
        }
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
        let credentials = match self.credentials_for(job, queue.region(), timeout).await {
            Ok(credentials) => credentials,
            Err((result, error)) => return failed(result, error),
        };
        let mut request = self.client(queue.region()).send_message().queue_url(queue.as_str()).message_body(&job.body);
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
        let call =
            request.customize().config_override(aws_sdk_sqs::Config::builder().credentials_provider(credentials));
        let sent = match tokio::time::timeout(timeout, call.send()).await {
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
                if error.code().is_some_and(expired_credentials) {
                    self.forget_credentials(job).await;
                }
                let (result, described) = outcome_of("aws_sqs", &error, retryable_code);
                failed(result, described)
            }
        }
    }
}

/// Codes that say the credentials a call was signed with are no longer good.
fn expired_credentials(code: &str) -> bool {
    matches!(code, "ExpiredToken" | "ExpiredTokenException" | "RequestExpired")
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
