//! The worker's own AWS credentials ([`AwsIdentity`]): static keys, or those a
//! container credentials endpoint serves (an ECS task's role, EKS Pod
//! Identity), fetched when first needed and again five minutes before they
//! expire — one fetch at a time. They sign `SendMessage` for destinations
//! without a role, and `AssumeRole` for those with one (`crate::aws_role`).
//! Also what a failed AWS call comes to ([`outcome_of`]), for both. A refusal's
//! text names the call it stopped (`aws_sqs: …`, `aws_sts: …`).
use std::time::{Duration, SystemTime};

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::config::Credentials;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use relayops_shared::config::{AwsIdentity, ContainerToken};
use relayops_shared::telemetry::error_chain;
use serde::Deserialize;

use crate::verdict::SendResult;

/// Why no credentials came: the attempt's result and its recorded error.
pub type Refusal = (SendResult, String);

/// Fetched credentials are fetched again this long before they expire.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// The longest a credentials endpoint may take.
const FETCH_LIMIT: Duration = Duration::from_secs(5);

pub struct OwnIdentity {
    source: Option<AwsIdentity>,
    fetched: tokio::sync::Mutex<Option<(Credentials, SystemTime)>>,
    http: reqwest::Client,
}

/// A container credentials endpoint's answer.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Served {
    access_key_id: String,
    secret_access_key: String,
    token: Option<String>,
    expiration: Option<chrono::DateTime<chrono::Utc>>,
}

impl OwnIdentity {
    pub fn new(source: Option<AwsIdentity>) -> Self {
        // Only ever the configured credentials endpoint: no redirects.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FETCH_LIMIT)
            .build()
            .unwrap_or_default();
        Self { source, fetched: tokio::sync::Mutex::new(None), http }
    }

    /// The credentials to sign with now.
    pub async fn credentials(&self) -> Result<Credentials, Refusal> {
        match &self.source {
            None => Err(no_credentials()),
            Some(AwsIdentity::Keys(keys)) => Ok(Credentials::new(
                &keys.access_key_id,
                &keys.secret_access_key,
                keys.session_token.clone(),
                None,
                "relayops-worker",
            )),
            Some(AwsIdentity::Container { url, token }) => {
                let mut fetched = self.fetched.lock().await;
                if let Some((credentials, _)) = fetched.as_ref().filter(|(_, refresh)| SystemTime::now() < *refresh) {
                    return Ok(credentials.clone());
                }
                let (credentials, refresh_after) = self.fetch(url, token.as_ref()).await?;
                *fetched = Some((credentials.clone(), refresh_after));
                Ok(credentials)
            }
        }
    }

    /// Drops fetched credentials: the next call fetches them again.
    pub async fn forget(&self) {
        *self.fetched.lock().await = None;
    }

    async fn fetch(&self, url: &str, token: Option<&ContainerToken>) -> Result<(Credentials, SystemTime), Refusal> {
        let refused =
            |why: String| (SendResult::NoAnswer { timed_out: false }, format!("aws_sqs: aws credentials: {why}"));
        let mut request = self.http.get(url);
        match token {
            Some(ContainerToken::Value(value)) => request = request.header("authorization", value.trim()),
            Some(ContainerToken::File(path)) => {
                let value = std::fs::read_to_string(path).map_err(|error| refused(format!("token file: {error}")))?;
                request = request.header("authorization", value.trim());
            }
            None => {}
        }
        let answer = request.send().await.map_err(|error| refused(format!("the credentials endpoint: {error}")))?;
        let status = answer.status();
        if !status.is_success() {
            return Err(refused(format!("the credentials endpoint answered {status}")));
        }
        let served: Served =
            answer.json().await.map_err(|error| refused(format!("the credentials endpoint: {error}")))?;
        let expires = served.expiration.map(SystemTime::from);
        let refresh_after = expires
            .and_then(|expires| expires.checked_sub(REFRESH_MARGIN))
            .unwrap_or_else(|| SystemTime::now() + REFRESH_MARGIN);
        let credentials = Credentials::new(
            served.access_key_id,
            served.secret_access_key,
            served.token,
            expires,
            "relayops-container-credentials",
        );
        Ok((credentials, refresh_after))
    }
}

/// Without an identity of its own the worker can neither send nor assume.
pub fn no_credentials() -> Refusal {
    (
        SendResult::NoAnswer { timed_out: false },
        "aws_sqs: no AWS credentials (neither AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY nor a container credentials \
         endpoint)"
            .into(),
    )
}

/// What a failed call to an AWS service comes to, and its description for
/// the attempt record (`<service>: <code>: <message>`): a 5xx, or a code
/// `retryable_code` takes for "not now", is retried; any other answer is final.
pub fn outcome_of<E>(
    service: &str,
    error: &SdkError<E, HttpResponse>,
    retryable_code: fn(&str) -> bool,
) -> (SendResult, String)
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match error {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            let code = error.code().unwrap_or("Unknown");
            let message = error.message().unwrap_or_default();
            let retryable = status >= 500 || retryable_code(code);
            (SendResult::ServiceError { status, retryable }, format!("{service}: {code}: {message}"))
        }
        SdkError::TimeoutError(_) => (SendResult::NoAnswer { timed_out: true }, format!("{service}: timeout")),
        other => (SendResult::NoAnswer { timed_out: false }, format!("{service}: {}", error_chain(other))),
    }
}
