//! Credentials for an AWS destination that names a role in its owner's
//! account: the worker assumes it (`sts:AssumeRole`, signed with its own
//! identity) with the tenant's id as `ExternalId` — the role's trust policy
//! requires it, so one tenant cannot have RelayOps act in an account that
//! trusts it for another tenant — and keeps the credentials until five
//! minutes before they expire. One assumption at a time per role and tenant:
//! deliveries that need it meanwhile wait for it rather than ask again.
//!
//! A refusal is the attempt's outcome, as an SQS error is: `AccessDenied`
//! (the trust policy does not name RelayOps or the `ExternalId`) fails the
//! delivery; throttling, a 5xx, no answer are retried.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use aws_sdk_sts::config::retry::RetryConfig;
use aws_sdk_sts::config::timeout::TimeoutConfig;
use aws_sdk_sts::config::{BehaviorVersion, Credentials, Region};

use crate::aws_identity::{outcome_of, OwnIdentity, Refusal, REFRESH_MARGIN};
use crate::verdict::SendResult;

/// How long an assumed role's credentials last.
const SESSION: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RoleKey {
    role_arn: String,
    external_id: String,
}

struct Assumed {
    credentials: Credentials,
    refresh_after: SystemTime,
}

type Slot = Arc<tokio::sync::Mutex<Option<Assumed>>>;

/// Assumed roles' credentials, per role and tenant.
pub struct AssumedRoles {
    /// STS clients per region; each call is signed with the worker's own identity.
    clients: Mutex<HashMap<String, aws_sdk_sts::Client>>,
    slots: Mutex<HashMap<RoleKey, Slot>>,
    own: Arc<OwnIdentity>,
    endpoint_override: Option<String>,
    connect_timeout: Duration,
}

impl AssumedRoles {
    pub fn new(own: Arc<OwnIdentity>, endpoint_override: Option<String>, connect_timeout: Duration) -> Self {
        Self { clients: Mutex::default(), slots: Mutex::default(), own, endpoint_override, connect_timeout }
    }

    /// Credentials for `role_arn` assumed for `tenant` (its `ExternalId`),
    /// from the cache while they have five minutes left.
    pub async fn credentials(
        &self,
        region: &str,
        role_arn: &str,
        tenant: &str,
        timeout: Duration,
    ) -> Result<Credentials, Refusal> {
        let key = RoleKey { role_arn: role_arn.to_owned(), external_id: tenant.to_owned() };
        let slot =
            Arc::clone(self.slots.lock().unwrap_or_else(PoisonError::into_inner).entry(key.clone()).or_default());
        let mut assumed = slot.lock().await;
        if let Some(current) = assumed.as_ref().filter(|current| SystemTime::now() < current.refresh_after) {
            return Ok(current.credentials.clone());
        }
        let fresh = self.assume(region, &key, timeout).await?;
        let credentials = fresh.credentials.clone();
        *assumed = Some(fresh);
        Ok(credentials)
    }

    /// Drops `role_arn`'s credentials for `tenant`: the next call assumes it again.
    pub async fn forget(&self, role_arn: &str, tenant: &str) {
        let key = RoleKey { role_arn: role_arn.to_owned(), external_id: tenant.to_owned() };
        let slot = self.slots.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned();
        if let Some(slot) = slot {
            *slot.lock().await = None;
        }
    }

    async fn assume(&self, region: &str, key: &RoleKey, timeout: Duration) -> Result<Assumed, Refusal> {
        let own = self.own.credentials().await?;
        let client = self.client(region);
        let session_name = format!("relayops-{}", key.external_id);
        let call = client
            .assume_role()
            .role_arn(&key.role_arn)
            .role_session_name(session_name)
            .external_id(&key.external_id)
            .duration_seconds(SESSION.as_secs() as i32)
            .customize()
            .config_override(aws_sdk_sts::Config::builder().credentials_provider(own))
            .send();
        let answer = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => return Err(outcome_of("aws_sts", &error, retryable_code)),
            Err(_) => return Err((SendResult::NoAnswer { timed_out: true }, "aws_sts: timeout".into())),
        };
        let Some(given) = answer.credentials() else {
            return Err((SendResult::ServiceError { status: 200, retryable: true }, "aws_sts: no credentials".into()));
        };
        let expires = SystemTime::try_from(*given.expiration()).unwrap_or_else(|_| SystemTime::now() + SESSION);
        let credentials = Credentials::new(
            given.access_key_id(),
            given.secret_access_key(),
            Some(given.session_token().to_owned()),
            Some(expires),
            "relayops-assumed-role",
        );
        let refresh_after = expires.checked_sub(REFRESH_MARGIN).unwrap_or(expires);
        Ok(Assumed { credentials, refresh_after })
    }

    fn client(&self, region: &str) -> aws_sdk_sts::Client {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let client = clients.entry(region.to_owned()).or_insert_with(|| {
            let mut config = aws_sdk_sts::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new(region.to_owned()))
                .http_client(relayops_shared::sqs_wakeup::https_client())
                .timeout_config(TimeoutConfig::builder().connect_timeout(self.connect_timeout).build())
                .retry_config(RetryConfig::disabled());
            if let Some(endpoint) = &self.endpoint_override {
                config = config.endpoint_url(endpoint);
            }
            aws_sdk_sts::Client::from_conf(config.build())
        });
        client.clone()
    }
}

/// STS codes that say "not now": throttling, its identity provider away,
/// credentials of the worker's own that expired on the way.
fn retryable_code(code: &str) -> bool {
    matches!(code, "Throttling" | "ThrottlingException" | "IDPCommunicationError" | "ExpiredToken" | "RequestExpired")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_trust_is_final_and_throttling_is_not() {
        assert!(retryable_code("Throttling"));
        assert!(retryable_code("ExpiredToken"));
        assert!(!retryable_code("AccessDenied"));
        assert!(!retryable_code("RegionDisabledException"));
    }
}
