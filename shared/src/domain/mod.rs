//! Parsed domain values. Each type has private fields and a `parse`, so once a
//! value exists it is known to be valid; nothing here does I/O.
pub mod account;
mod delivery_status;
mod destination;
mod endpoint_url;
mod event_type;
mod idempotency_key;
pub mod operational;
mod ordering_key;
mod payload;
mod signing_secret;

pub use delivery_status::{AttemptOutcome, DeliveryStatus};
pub use destination::{AwsRoleArn, Destination, SqsQueueUrl};
pub use endpoint_url::EndpointUrl;
pub use event_type::{EventType, EventTypePattern};
pub use idempotency_key::IdempotencyKey;
pub use operational::EndpointKind;
pub use ordering_key::{DeadLetterLane, OrderingKey, MAX_ORDERING_KEY_CHARS};
pub use payload::{EventPayload, PayloadError, MAX_PAYLOAD_BYTES};
pub use signing_secret::SigningSecret;

/// A value from a client did not parse; the message says what is wrong and is
/// safe to return to that client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    pub field: &'static str,
    pub message: String,
}

impl ValidationError {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self { field, message: message.into() }
    }
}
