//! The OpenAPI 3.1 document of the whole API, generated from the code: each
//! HTTP function documents its own routes (`utoipa::path` on the handlers,
//! `ToSchema` on the wire types) and this module merges them, then adds what
//! every route shares — bearer security, and the problem body on every error
//! response. `relayops openapi` prints it; `docs/openapi.json` is that output,
//! committed (a test fails when it is stale); the api role serves it at
//! `GET /openapi.json`.
use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use relayops_shared::api::openapi::{admin_scheme, bearer_scheme, Problem, ADMIN, BEARER};
use utoipa::openapi::path::{Operation, OperationBuilder, PathItem};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, HttpMethod, InfoBuilder, ObjectBuilder, OpenApi, OpenApiBuilder, Ref, RefOr,
};
use utoipa::{PartialSchema, ToSchema};

const PROBLEM_TYPE: &str = "application/problem+json";

/// The document, built once per process.
pub fn document() -> &'static OpenApi {
    static DOCUMENT: OnceLock<OpenApi> = OnceLock::new();
    DOCUMENT.get_or_init(build)
}

/// The document as `relayops openapi` prints it and `docs/openapi.json` holds it.
pub fn document_json() -> String {
    let mut text = serde_json::to_string_pretty(document()).expect("an OpenAPI document serialises");
    text.push('\n');
    text
}

/// `GET /openapi.json` (no credentials needed).
pub async fn serve() -> impl IntoResponse {
    static JSON: OnceLock<String> = OnceLock::new();
    ([(header::CONTENT_TYPE, "application/json")], JSON.get_or_init(document_json).as_str())
}

fn build() -> OpenApi {
    let info = InfoBuilder::new()
        .title("RelayOps API")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "Multi-tenant webhook delivery: post events, manage endpoints, follow deliveries and their \
             attempts, replay what failed. Every error is an RFC 7807 problem (`application/problem+json`).",
        ))
        .build();
    let mut document = OpenApiBuilder::new().info(info).build();
    for part in [
        relayops_ingest::openapi(),
        relayops_query::openapi(),
        relayops_replay::openapi(),
        relayops_manage::openapi(),
        relayops_admin::openapi(),
    ] {
        document.merge(part);
    }
    document.paths.add_path_operation(
        "/openapi.json",
        vec![HttpMethod::Get],
        OperationBuilder::new()
            .summary(Some("This document"))
            .operation_id(Some("openapi"))
            .tag("meta")
            .response(
                "200",
                ResponseBuilder::new()
                    .description("The OpenAPI document")
                    .content("application/json", ContentBuilder::new().schema(Some(ObjectBuilder::new())).build()),
            )
            .build(),
    );
    let components = document.components.take().unwrap_or_default();
    let components = ComponentsBuilder::from(components)
        .schema(Problem::name(), Problem::schema())
        .response("Problem", problem_response("An error, described as an RFC 7807 problem"))
        .security_scheme(BEARER, bearer_scheme())
        .security_scheme(ADMIN, admin_scheme())
        .build();
    document.components = Some(components);
    for item in document.paths.paths.values_mut() {
        for operation in operations(item) {
            add_problem_responses(operation);
        }
    }
    document
}

fn problem_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(PROBLEM_TYPE, ContentBuilder::new().schema(Some(Ref::from_schema_name(Problem::name()))).build())
        .build()
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [&mut item.get, &mut item.post, &mut item.put, &mut item.patch, &mut item.delete].into_iter().flatten()
}

/// Every error response carries the problem body; and the errors any route
/// can give (malformed input, missing credentials, …) are listed on each.
fn add_problem_responses(operation: &mut Operation) {
    let secured = operation.security.as_ref().is_some_and(|requirements| !requirements.is_empty());
    let has_body = operation.request_body.is_some();
    let mut common = vec![("400", "Malformed request (a bad id, query parameter or JSON)")];
    if secured {
        common.push(("401", "Missing or invalid credentials"));
        common.push(("403", "The credentials lack the scope this route needs (ingest: or the tenant is suspended)"));
    }
    if has_body {
        common.push(("415", "The body is not `application/json`"));
        common.push(("422", "The body is well-formed but invalid (the detail names the field)"));
    }
    let responses = &mut operation.responses.responses;
    for (status, description) in common {
        responses.entry(status.to_owned()).or_insert_with(|| RefOr::T(problem_response(description)));
    }
    for (status, response) in responses.iter_mut() {
        if let RefOr::T(response) = response {
            if (status.starts_with('4') || status.starts_with('5')) && response.content.is_empty() {
                *response = problem_response(&response.description);
            }
        }
    }
    responses.insert("default".to_owned(), RefOr::Ref(Ref::from_response_name("Problem")));
}
