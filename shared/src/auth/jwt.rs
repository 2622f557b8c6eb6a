//! Login tokens for users: HS256 JWTs whose key comes only from the
//! environment (`RELAYOPS_JWT_SECRET`, at least 32 bytes). Claims carry the
//! user, its tenant and its login session (`repo::login_sessions`, which
//! decides whether the token still lets anyone in); the tenant is never
//! taken from a request. A token lives as long as its session may.
use std::time::Duration;

use chrono::{DateTime, Utc};
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::device::DeviceKey;
use crate::ids::{TenantId, UserId};

const ISSUER: &str = "relayops";

#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    pub sub: UserId,
    pub tid: TenantId,
    pub role: String,
    pub iss: String,
    pub iat: i64,
    pub exp: i64,
    /// The login session (tokens issued before sessions were kept have
    /// none, and are refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sid: Option<Uuid>,
}

#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("the JWT secret must be at least 32 bytes")]
    WeakSecret,
    #[error("signing the token failed")]
    Sign(#[source] jsonwebtoken::errors::Error),
    #[error("invalid token")]
    Invalid(#[source] jsonwebtoken::errors::Error),
}

pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    /// A session's absolute lifetime, and its idle timeout.
    lifetime: Duration,
    idle: Duration,
    /// Signs known-device tokens (sign-in throttling).
    devices: DeviceKey,
}

impl JwtKeys {
    /// Keys for sessions of at most `lifetime`, ended after `idle` unused.
    pub fn new(secret: &[u8], lifetime: Duration, idle: Duration) -> Result<Self, JwtError> {
        if secret.len() < 32 {
            return Err(JwtError::WeakSecret);
        }
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        validation.leeway = 5;
        Ok(Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            lifetime,
            idle,
            devices: DeviceKey::derive(secret),
        })
    }

    /// A session's absolute lifetime (`RELAYOPS_SESSION_LIFETIME_SECS`).
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The key known-device tokens are signed and checked with.
    pub fn devices(&self) -> &DeviceKey {
        &self.devices
    }

    /// A session's idle timeout (`RELAYOPS_SESSION_IDLE_SECS`).
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// A token for the user's `session`, valid until `expires` (the session's end).
    pub fn issue(
        &self,
        user: UserId,
        tenant: TenantId,
        role: &str,
        session: Uuid,
        expires: DateTime<Utc>,
    ) -> Result<String, JwtError> {
        let claims = Claims {
            sub: user,
            tid: tenant,
            role: role.to_owned(),
            iss: ISSUER.to_owned(),
            iat: Utc::now().timestamp(),
            exp: expires.timestamp(),
            sid: Some(session),
        };
        encode(&Header::new(Algorithm::HS256), &claims, &self.encoding).map_err(JwtError::Sign)
    }

    /// Checks signature, algorithm, issuer and expiry.
    pub fn verify(&self, token: &str) -> Result<Claims, JwtError> {
        decode::<Claims>(token, &self.decoding, &self.validation).map(|data| data.claims).map_err(JwtError::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_with_their_key_and_before_expiry() {
        let minute = Duration::from_secs(60);
        let keys = JwtKeys::new(&[7u8; 32], minute, minute).unwrap();
        let (user, tenant, session) = (UserId::new(), TenantId::new(), Uuid::new_v4());
        let token = keys.issue(user, tenant, "admin", session, Utc::now() + chrono::Duration::minutes(1)).unwrap();
        let claims = keys.verify(&token).unwrap();
        assert_eq!((claims.sub, claims.tid, claims.sid), (user, tenant, Some(session)));
        let other = JwtKeys::new(&[8u8; 32], minute, minute).unwrap();
        assert!(other.verify(&token).is_err(), "forged with another key");
        let claims = Claims {
            sub: user,
            tid: tenant,
            role: "admin".into(),
            iss: ISSUER.into(),
            iat: 0,
            exp: 1,
            sid: Some(session),
        };
        let old = encode(&Header::new(Algorithm::HS256), &claims, &keys.encoding).unwrap();
        assert!(keys.verify(&old).is_err(), "expired");
        assert!(JwtKeys::new(b"short", minute, minute).is_err());
    }
}
