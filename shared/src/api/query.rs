//! Query-string extractors whose rejections are problem responses (400) that
//! name the parameter at fault, instead of axum's plain-text rejection:
//! [`ApiQuery`] for routes with parameters (unknown ones refused through
//! `deny_unknown_fields`), [`NoQuery`] for lists that take none.
use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::ApiError;

pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::BadRequest(rejection.body_text())),
        }
    }
}

/// For a list that takes no query parameters: any parameter is a 400 naming
/// it, as the other lists refuse unknown ones, so a typo or a filter this list
/// does not have never passes silently (`?limit=5` would otherwise answer
/// everything).
pub struct NoQuery;

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        match url::form_urlencoded::parse(query.as_bytes()).next() {
            Some((name, _)) => {
                Err(ApiError::BadRequest(format!("`{name}`: unknown parameter; this list takes no query parameters")))
            }
            None => Ok(Self),
        }
    }
}
