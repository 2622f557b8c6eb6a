//! What every HTTP function shares: its state, the API-key authentication
//! extractor, the JSON body extractor and RFC 7807 problem responses. Routers
//! themselves live in the function crates.
mod auth;
mod json;
mod problem;

use std::sync::Arc;

use crate::backpressure::Backpressure;
use crate::db::Pool;

pub use auth::Authenticated;
pub use json::ApiJson;
pub use problem::{not_found_fallback, ApiError};

/// Asks the outbox publisher to run soon. In-process it is a `Notify`; in AWS it
/// is a debounced SQS message. Best effort: the outbox is the source of truth and
/// the publisher's schedule picks up anything a lost wake-up missed.
pub trait PublisherWakeup: Send + Sync {
    fn wake(&self);
}

impl PublisherWakeup for tokio::sync::Notify {
    fn wake(&self) {
        self.notify_one();
    }
}

/// State shared by the HTTP functions' handlers.
#[derive(Clone)]
pub struct ApiState {
    pub pool: Pool,
    pub wakeup: Option<Arc<dyn PublisherWakeup>>,
    /// When set, ingest refuses work while the pipeline is backed up.
    pub backpressure: Option<Arc<Backpressure>>,
}

impl ApiState {
    pub fn new(pool: Pool) -> Self {
        Self { pool, wakeup: None, backpressure: None }
    }

    pub fn with_backpressure(mut self, backpressure: Arc<Backpressure>) -> Self {
        self.backpressure = Some(backpressure);
        self
    }

    /// 503 + `Retry-After` while the outbox or the ready queue is over its limit.
    pub fn check_backpressure(&self) -> Result<(), ApiError> {
        match self.backpressure.as_ref().map(|gauge| gauge.check()) {
            Some(Err(refusal)) => Err(ApiError::Overloaded {
                detail: format!("{}; retry later", refusal.reason),
                retry_after_secs: refusal.retry_after_secs,
            }),
            _ => Ok(()),
        }
    }

    pub fn with_wakeup(mut self, wakeup: Arc<dyn PublisherWakeup>) -> Self {
        self.wakeup = Some(wakeup);
        self
    }

    pub fn wake_publisher(&self) {
        if let Some(wakeup) = &self.wakeup {
            wakeup.wake();
        }
    }
}

/// Parses a path id; a malformed id is a 400 that says what was expected.
pub fn parse_path_id<T>(text: &str) -> Result<T, ApiError>
where
    T: std::str::FromStr<Err = crate::ids::IdParseError>,
{
    text.parse().map_err(|error: crate::ids::IdParseError| ApiError::BadRequest(error.to_string()))
}
