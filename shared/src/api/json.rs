//! A JSON body extractor whose rejections are problem responses with the
//! reason (syntax error with position, wrong field type, missing content type).
//! It also refuses strings holding U+0000 (`\u0000`): valid JSON, but Postgres
//! can store it neither in `text` nor in `jsonb`, so letting it through would
//! turn a client's mistake into a server error.
use axum::body::{Body, Bytes};
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::ApiError;

pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (parts, body) = request.into_parts();
        let bytes = match Bytes::from_request(Request::from_parts(parts.clone(), body), state).await {
            Ok(bytes) => bytes,
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return Err(ApiError::PayloadTooLarge(rejection.body_text()))
            }
            Err(rejection) => return Err(ApiError::BadRequest(rejection.body_text())),
        };
        if has_escaped_nul(&bytes) {
            let message = "strings may not contain the character U+0000 (`\\u0000`)";
            return Err(ApiError::Validation(crate::domain::ValidationError::new("body", message)));
        }
        let request = Request::from_parts(parts, Body::from(bytes));
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(rejection_to_problem(rejection)),
        }
    }
}

fn rejection_to_problem(rejection: JsonRejection) -> ApiError {
    let text = rejection.body_text();
    match rejection {
        JsonRejection::JsonDataError(_) => ApiError::Validation(crate::domain::ValidationError::new("body", text)),
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::UnsupportedMediaType("expected `Content-Type: application/json`".into())
        }
        other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(text),
        _ => ApiError::BadRequest(text),
    }
}

/// Whether the JSON text holds a `\u0000` escape (one whose backslash is not
/// itself escaped). Raw NUL bytes need no check: JSON forbids them in strings.
fn has_escaped_nul(json: &[u8]) -> bool {
    json.windows(6).enumerate().any(|(at, window)| {
        window == b"\\u0000" && json[..at].iter().rev().take_while(|byte| **byte == b'\\').count() % 2 == 0
    })
}

#[cfg(test)]
mod tests {
    use super::has_escaped_nul;

    #[test]
    fn only_a_real_nul_escape_is_found() {
        assert!(has_escaped_nul(br#"{"a": "x\u0000"}"#));
        assert!(has_escaped_nul(br#"{"\u0000": 1}"#));
        assert!(has_escaped_nul(br#"{"a": "\\\u0000"}"#));
        assert!(!has_escaped_nul(br#"{"a": "\\u0000"}"#), "an escaped backslash, then text");
        assert!(!has_escaped_nul(br#"{"a": "\u0001"}"#));
    }
}
