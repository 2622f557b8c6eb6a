//! The rules an account's email and password follow, wherever an account is
//! made or changed (bootstrap, the admin API's tenants, a tenant's users, a
//! password change) and wherever a login is bounded.
use super::ValidationError;

/// The longest password accepted anywhere (longer is refused before any
/// hashing: a 1 MB password took 1.9 s of Argon2).
pub const MAX_PASSWORD_CHARS: usize = 1024;

/// An email address as accounts take it: 3 to 320 bytes, `user@domain.tld`
/// in shape, no whitespace.
pub fn checked_email(email: &str) -> Result<&str, ValidationError> {
    let valid = (3..=320).contains(&email.len())
        && email.split_once('@').is_some_and(|(user, domain)| !user.is_empty() && domain.contains('.'))
        && !email.chars().any(char::is_whitespace);
    valid.then_some(email).ok_or_else(|| ValidationError::new("email", "must be an email address"))
}

/// A password presented to be checked (a sign-in, the current password of a
/// change) under `field`: 1 to [`MAX_PASSWORD_CHARS`] characters, bounded
/// before any lookup or hashing.
pub fn presented_password<'a>(field: &'static str, password: &'a str) -> Result<&'a str, ValidationError> {
    match password.chars().count() {
        1..=MAX_PASSWORD_CHARS => Ok(password),
        _ => Err(ValidationError::new(field, format!("must be 1 to {MAX_PASSWORD_CHARS} characters"))),
    }
}

/// A new password: 10 to [`MAX_PASSWORD_CHARS`] characters.
pub fn checked_password(password: &str) -> Result<&str, ValidationError> {
    match password.chars().count() {
        10..=MAX_PASSWORD_CHARS => Ok(password),
        _ => Err(ValidationError::new("password", format!("must be 10 to {MAX_PASSWORD_CHARS} characters"))),
    }
}
