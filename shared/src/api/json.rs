//! A JSON body extractor whose rejections are problem responses with the
//! reason (syntax error with position, wrong field type, missing content type).
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
