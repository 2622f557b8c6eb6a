//! Credentials: API keys (only a hash stored) and password hashing.
pub mod admin;
pub mod api_key;
pub mod jwt;
pub mod password;
pub mod token_hash;

pub use api_key::{ApiKeySecret, Scope};
