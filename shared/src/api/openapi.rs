//! OpenAPI building blocks every HTTP function's documentation shares: the
//! problem body (RFC 7807), the bearer security scheme, and schemas for the
//! prefixed ids. Each function crate documents its own routes; the runner
//! merges them (see `relayops::openapi`).
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ObjectBuilder, RefOr, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::ids::{ApiKeyId, AttemptId, DeliveryId, EndpointId, EventId, SubscriptionId, TenantId, UserId};

/// The name of the security scheme every authenticated route requires.
pub const BEARER: &str = "bearer";

/// Every error answers with this body, as `application/problem+json`.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct Problem {
    /// `https://relayops.dev/problems/<kind>`.
    #[schema(example = "https://relayops.dev/problems/bad-request")]
    r#type: String,
    title: String,
    /// The HTTP status, repeated.
    status: u16,
    /// What is wrong, safe to show the caller (server errors say nothing more).
    detail: String,
}

/// `Authorization: Bearer <API key or login token>`.
pub fn bearer_scheme() -> SecurityScheme {
    let mut http = Http::new(HttpAuthScheme::Bearer);
    http.description = Some("An API key (`rk_live_…`) or a login token from `POST /v1/auth/login`.".into());
    SecurityScheme::Http(http)
}

/// The name of the security scheme of the platform admin API.
pub const ADMIN: &str = "admin";

/// `Authorization: Bearer <platform admin token>` (`/admin/v1/…` only).
pub fn admin_scheme() -> SecurityScheme {
    let mut http = Http::new(HttpAuthScheme::Bearer);
    http.description = Some(
        "The platform operators' token (`RELAYOPS_ADMIN_TOKEN_SHA256` holds its hash);          tenant API keys and login tokens are refused."
            .into(),
    );
    SecurityScheme::Http(http)
}

macro_rules! id_schema {
    ($($name:ident),*) => {$(
        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(format!("^{}_[0-9a-fA-F]{{32}}$", $name::PREFIX)))
                    .examples([format!("{}_0192f1c4a8b07c3e9d5a6b7c8d9e0f12", $name::PREFIX)])
                    .into()
            }
        }

        impl ToSchema for $name {}
    )*};
}

id_schema!(TenantId, UserId, ApiKeyId, EndpointId, SubscriptionId, EventId, DeliveryId, AttemptId);
