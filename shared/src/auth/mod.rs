//! Credentials: API keys (only a hash stored), password hashing, login
//! tokens and known-device tokens.
pub mod admin;
pub mod api_key;
pub mod device;
pub mod jwt;
pub mod password;
pub mod token_hash;

pub use api_key::{ApiKeySecret, Scope};
