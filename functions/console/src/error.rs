//! What goes wrong in the console, as pages: an absent or expired session
//! sends the browser to the sign-in page; every other error is an HTML page
//! with the status and a message a person can act on. Server errors say only
//! that something went wrong (the API's error type logs their cause).
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use relayops_shared::api::ApiError;
use relayops_shared::db::DbError;

use crate::layout;
use crate::session;

#[derive(Debug)]
pub enum ConsoleError {
    /// No session, or an expired or invalid one: sign in (again).
    SignIn {
        expired: bool,
    },
    /// A form without the session's CSRF token, or a caller without the right.
    Forbidden(String),
    NotFound(&'static str),
    BadRequest(String),
    Api(ApiError),
}

impl From<ApiError> for ConsoleError {
    fn from(error: ApiError) -> Self {
        Self::Api(error)
    }
}

impl From<DbError> for ConsoleError {
    fn from(error: DbError) -> Self {
        Self::Api(error.into())
    }
}

impl From<relayops_shared::domain::ValidationError> for ConsoleError {
    fn from(error: relayops_shared::domain::ValidationError) -> Self {
        Self::BadRequest(format!("{}: {}", error.field, error.message))
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            // The cookies are cleared only when the request sent one that
            // no longer works: a request without it must never delete a
            // browser's good session.
            Self::SignIn { expired: true } => return session::to_sign_in_forgetting("/console/login?expired=1"),
            Self::SignIn { expired: false } => {
                return (StatusCode::SEE_OTHER, [(header::LOCATION, "/console/login".to_owned())]).into_response();
            }
            Self::Forbidden(message) => (StatusCode::FORBIDDEN, message),
            Self::NotFound(what) => (StatusCode::NOT_FOUND, format!("No such {what} in this tenant.")),
            Self::BadRequest(message) => (StatusCode::BAD_REQUEST, message),
            Self::Api(error) => {
                let message = error.to_string();
                // The API's own response decides the status (and logs server errors).
                (error.into_response().status(), message)
            }
        };
        let title = status.canonical_reason().unwrap_or("Error");
        (status, layout::bare_page(title, &message)).into_response()
    }
}

/// A page that shows why `error` refused a form: answered with the error's
/// status, and with `Retry-After` when it was a throttle's refusal.
pub fn refused_page(mut page: Response, error: &ApiError) -> Response {
    *page.status_mut() = error.status();
    if let ApiError::RateLimited { retry_after_secs, .. } = error {
        page.headers_mut().insert(header::RETRY_AFTER, (*retry_after_secs).into());
    }
    page
}

/// The console's answer to an unknown path under `/console/` (its routes'
/// catch-all, and its Lambda's fallback).
pub async fn not_found_page() -> Response {
    ConsoleError::NotFound("page").into_response()
}
