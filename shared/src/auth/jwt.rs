//! Short-lived session tokens for users: HS256 JWTs whose key comes only from
//! the environment (`RELAYOPS_JWT_SECRET`, at least 32 bytes). Claims carry the
//! user and its tenant; the tenant is never taken from a request.
use std::time::Duration;

use chrono::{DateTime, Utc};
use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

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
    ttl: Duration,
}

impl JwtKeys {
    pub fn new(secret: &[u8], ttl: Duration) -> Result<Self, JwtError> {
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
            ttl,
        })
    }

    /// A token for the user, and when it expires.
    pub fn issue(&self, user: UserId, tenant: TenantId, role: &str) -> Result<(String, DateTime<Utc>), JwtError> {
        let now = Utc::now();
        let expires = now + chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::minutes(15));
        let claims = Claims {
            sub: user,
            tid: tenant,
            role: role.to_owned(),
            iss: ISSUER.to_owned(),
            iat: now.timestamp(),
            exp: expires.timestamp(),
        };
        let token = encode(&Header::new(Algorithm::HS256), &claims, &self.encoding).map_err(JwtError::Sign)?;
        Ok((token, expires))
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
        let keys = JwtKeys::new(&[7u8; 32], Duration::from_secs(60)).unwrap();
        let (user, tenant) = (UserId::new(), TenantId::new());
        let (token, _) = keys.issue(user, tenant, "admin").unwrap();
        let claims = keys.verify(&token).unwrap();
        assert_eq!((claims.sub, claims.tid), (user, tenant));
        let other = JwtKeys::new(&[8u8; 32], Duration::from_secs(60)).unwrap();
        assert!(other.verify(&token).is_err(), "forged with another key");
        let expired = JwtKeys::new(&[7u8; 32], Duration::ZERO).unwrap();
        let claims = Claims { sub: user, tid: tenant, role: "admin".into(), iss: ISSUER.into(), iat: 0, exp: 1 };
        let old = encode(&Header::new(Algorithm::HS256), &claims, &expired.encoding).unwrap();
        assert!(keys.verify(&old).is_err(), "expired");
        assert!(JwtKeys::new(b"short", Duration::from_secs(1)).is_err());
    }
}
