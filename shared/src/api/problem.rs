//! The API layer's error type and its RFC 7807 (`application/problem+json`)
//! body. Client errors say what is wrong; server errors are logged with their
//! cause chain and answered with an opaque 500 (or 503 when worth retrying).
use std::error::Error as StdError;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::db::DbError;
use crate::domain::ValidationError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Validation(#[from] ValidationError),
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("missing or invalid credentials")]
    Unauthorized,
    /// 401 with a specific message (a failed login).
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    /// The platform operator suspended the caller's tenant (ingest refused).
    #[error("this tenant is suspended by the platform operator; events are not accepted until it is resumed")]
    Suspended,
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    Conflict(String),
    /// The tenant is over its ingest rate.
    #[error("{detail}")]
    RateLimited { detail: String, retry_after_secs: u64 },
    /// The pipeline is backed up; the detail says which part.
    #[error("{detail}")]
    Overloaded { detail: String, retry_after_secs: u64 },
    /// A history table has no partition for now (`db::partitions`): nothing
    /// can be stored until partition maintenance runs again.
    #[error(
        "history partitions missing: no partition covers the current time, so events cannot be stored; \
         partition maintenance (the publisher's history maintenance) is not running. Retry later"
    )]
    PartitionsMissing { retry_after_secs: u64 },
    #[error("service temporarily unavailable")]
    Unavailable { retry_after_secs: u64, source: Option<Box<dyn StdError + Send + Sync>> },
    #[error("internal error")]
    Internal(#[source] Box<dyn StdError + Send + Sync>),
}

impl ApiError {
    pub fn internal(error: impl StdError + Send + Sync + 'static) -> Self {
        Self::Internal(Box::new(error))
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Self::Validation(_) => (StatusCode::UNPROCESSABLE_ENTITY, "validation", "Invalid request"),
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad-request", "Malformed request"),
            Self::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type", "Unsupported media type")
            }
            Self::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large", "Request body too large"),
            Self::Unauthorized | Self::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden", "Forbidden"),
            Self::Suspended => (StatusCode::FORBIDDEN, "tenant-suspended", "Tenant suspended"),
            Self::NotFound(_) => (StatusCode::NOT_FOUND, "not-found", "Not found"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict", "Conflict"),
            Self::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate-limited", "Too many requests"),
            Self::Overloaded { .. } => (StatusCode::SERVICE_UNAVAILABLE, "overloaded", "Backlog over threshold"),
            Self::PartitionsMissing { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "history-partitions-missing", "History partitions missing")
            }
            Self::Unavailable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "unavailable", "Service unavailable"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal", "Internal server error"),
        }
    }
}

/// A payload over the limit is "too large" (413), whatever the body's size.
impl From<crate::domain::PayloadError> for ApiError {
    fn from(error: crate::domain::PayloadError) -> Self {
        match error {
            crate::domain::PayloadError::Invalid(invalid) => Self::Validation(invalid),
            too_large @ crate::domain::PayloadError::TooLarge { .. } => Self::PayloadTooLarge(too_large.to_string()),
        }
    }
}

/// A write refused for a missing history partition is worth retrying once
/// maintenance had a chance to run (it runs every minute by default).
const PARTITIONS_MISSING_RETRY_SECS: u64 = 30;

impl ApiError {
    /// How a database error answers; `source` (the same error, owned) is
    /// what the log line shows. Constraint names become client messages here
    /// and nowhere else.
    fn from_db(error: &DbError, source: Box<dyn StdError + Send + Sync>) -> Self {
        if error.is_unavailable() {
            return Self::Unavailable { retry_after_secs: 1, source: Some(source) };
        }
        if let DbError::NoPartition(_) = error {
            crate::history::missing::refused(error);
            return Self::PartitionsMissing { retry_after_secs: PARTITIONS_MISSING_RETRY_SECS };
        }
        match error.constraint() {
            Some("user_accounts_email_key") => Self::Conflict("a user with this email already exists".into()),
            Some("api_keys_key_prefix_key" | "api_keys_key_hash_key") => {
                Self::Conflict("key collision; please retry".into())
            }
            _ => Self::Internal(source),
        }
    }
}

impl From<DbError> for ApiError {
    fn from(error: DbError) -> Self {
        let error = std::sync::Arc::new(error);
        Self::from_db(&error, Box::new(std::sync::Arc::clone(&error)))
    }
}

/// A write that went through a batcher: its database error, shared with the
/// other requests of its batch, answers as [`DbError`] would.
impl From<crate::db::batcher::BatchError> for ApiError {
    fn from(error: crate::db::batcher::BatchError) -> Self {
        match error {
            crate::db::batcher::BatchError::Stopped => Self::Unavailable { retry_after_secs: 1, source: None },
            crate::db::batcher::BatchError::Failed(error) => Self::from_db(&error, Box::new(error.clone())),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind, title) = self.parts();
        let detail = match &self {
            Self::Internal(source) => {
                tracing::error!(error = %crate::telemetry::error_chain(source.as_ref()), "request failed");
                "an internal error occurred; it has been logged".to_owned()
            }
            Self::Unavailable { source: Some(source), .. } => {
                tracing::warn!(error = %crate::telemetry::error_chain(source.as_ref()), "dependency unavailable");
                "a dependency is temporarily unavailable; retry later".to_owned()
            }
            other => other.to_string(),
        };
        let mut body = json!({
            "type": format!("https://relayops.dev/problems/{kind}"),
            "title": title,
            "status": status.as_u16(),
            "detail": detail,
        });
        // The id support can look up in the logs, when served through `observe`.
        if let Some(request_id) = crate::observe::http::current_request_id() {
            body["request_id"] = json!(request_id);
        }
        let mut response = (status, axum::Json(body)).into_response();
        response.extensions_mut().insert(ProblemType(kind));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Self::Unavailable { retry_after_secs, .. }
        | Self::PartitionsMissing { retry_after_secs }
        | Self::Overloaded { retry_after_secs, .. }
        | Self::RateLimited { retry_after_secs, .. } = self
        {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
        }
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The problem type of an error response (`rate-limited`, `overloaded`, …),
/// left in the response's extensions for middleware that counts refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProblemType(pub &'static str);

/// Router fallback: unknown paths get a problem body too.
pub async fn not_found_fallback() -> ApiError {
    ApiError::NotFound("route")
}
