//! Password hashing with Argon2id (OWASP's recommended parameters: 19 MiB,
//! 2 iterations, 1 lane), stored as a PHC string so parameters can change later.
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

#[derive(Debug, thiserror::Error)]
#[error("password hashing failed: {0}")]
pub struct PasswordError(String);

impl PasswordError {
    /// The blocking task that hashed a password panicked or was cancelled.
    pub fn from_join(error: &tokio::task::JoinError) -> Self {
        Self(error.to_string())
    }
}

/// Hashes a password off the async workers (Argon2 is deliberately slow).
pub async fn hash_password_blocking(password: String) -> Result<String, PasswordError> {
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|error| PasswordError::from_join(&error))?
}

/// Checks a password off the async workers (Argon2 takes tens of milliseconds).
pub async fn verify_password_blocking(password: String, stored: String) -> bool {
    tokio::task::spawn_blocking(move || verify_password(&password, &stored)).await.unwrap_or(false)
}

/// A hash no password matches, verified against when an email is unknown so
/// that a login takes as long whether or not the account exists.
pub fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| {
        let random = uuid::Uuid::new_v4().to_string();
        hash_password(&random).unwrap_or_default()
    })
}

fn hasher() -> Result<Argon2<'static>, PasswordError> {
    let params = Params::new(19 * 1024, 2, 1, None).map_err(|error| PasswordError(error.to_string()))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

pub fn hash_password(password: &str) -> Result<String, PasswordError> {
    let salt = SaltString::generate(&mut OsRng);
    hasher()?
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| PasswordError(error.to_string()))
}

pub fn verify_password(password: &str, stored: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(stored) else {
        return false;
    };
    hasher().is_ok_and(|argon| argon.verify_password(password.as_bytes(), &parsed).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_round_trip() {
        let stored = hash_password("correct horse").unwrap();
        assert!(stored.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &stored));
        assert!(!verify_password("wrong", &stored));
    }
}
