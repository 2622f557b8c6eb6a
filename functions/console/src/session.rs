//! Signing in and out, the session, and CSRF protection.
//!
//! The session cookie holds the API's own login token (a JWT from
//! `POST /v1/auth/login`'s handler, naming a login session kept in Postgres),
//! `HttpOnly`, `SameSite=Strict`, scoped to `/console`, `Secure` when the
//! request came over HTTPS, and lives as long as the session may. Each
//! request resolves the token exactly as a bearer token is resolved (the
//! session must be live; user and role re-read from the database), so when
//! the session ends — "Sign out" here, "Sign out everywhere", the idle
//! timeout, its lifetime — the next page sends the browser to the sign-in
//! page, and the old cookie value opens nothing and posts nothing anywhere.
//!
//! CSRF: every state-changing form carries a token derived from the session
//! (SHA-256 of a label and the session token, which only the server and the
//! HttpOnly cookie hold), checked in constant time before anything runs. The
//! sign-in form, which has no session yet, uses a random double-submit token
//! (a cookie and a form field that must match). SameSite=Strict is the second
//! line: a cross-site post carries no session cookie at all.
use axum::extract::{FromRequest, FromRequestParts, Query, Request, State};
use axum::http::header::{self, HeaderMap};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{AppendHeaders, IntoResponse, Response};
use axum::Form;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::Utc;
use maud::html;
use relayops_shared::api::{by_login_token, end_sessions, ApiError, ApiJson, ApiState, Authenticated, ClientAddress};
use relayops_shared::auth::Scope;
use relayops_shared::ids::TenantId;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ConsoleError;
use crate::layout;

pub const SESSION_COOKIE: &str = "relayops_session";
const LOGIN_CSRF_COOKIE: &str = "relayops_login_csrf";
const CSRF_LABEL: &[u8] = b"relayops-console-csrf\0";

/// A signed-in person, resolved from the session cookie.
pub struct Session {
    pub caller: Authenticated,
    csrf: String,
    /// The login token the cookie holds (to end its session).
    token: String,
}

impl Session {
    pub fn tenant(&self) -> TenantId {
        self.caller.tenant_id
    }

    /// The token every form of this session must carry.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Changes need an admin, as the API's manage and replay routes do.
    pub fn require_admin(&self) -> Result<(), ConsoleError> {
        self.caller.require(Scope::Admin).map_err(|_| ConsoleError::Forbidden("only admins can change this".into()))
    }
}

fn csrf_for(token: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(CSRF_LABEL);
    hasher.update(token.as_bytes());
    URL_SAFE_NO_PAD.encode(hasher.finalize())
}

fn same(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A cookie's value from the request's `Cookie` headers.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
}

/// Whether the browser reached us over HTTPS (directly, or through API
/// Gateway / a proxy that says so), so cookies get `Secure`.
fn over_https(headers: &HeaderMap) -> bool {
    headers.get("x-forwarded-proto").and_then(|value| value.to_str().ok()).is_some_and(|proto| proto == "https")
}

fn set_cookie(name: &str, value: &str, max_age_secs: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}")
}

/// Removes the session cookie.
pub fn clear_cookie() -> String {
    set_cookie(SESSION_COOKIE, "", 0, false)
}

impl FromRequestParts<ApiState> for Session {
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let token = cookie(&parts.headers, SESSION_COOKIE)
            .filter(|token| !token.is_empty())
            .ok_or(ConsoleError::SignIn { expired: false })?;
        match by_login_token(state, &token).await {
            Ok(caller) => Ok(Session { caller, csrf: csrf_for(&token), token }),
            Err(ApiError::Unauthorized) => Err(ConsoleError::SignIn { expired: true }),
            Err(other) => Err(other.into()),
        }
    }
}

/// A posted form, accepted only with the session's CSRF token (`csrf`).
pub struct ConsoleForm<T> {
    pub session: Session,
    pub fields: T,
}

#[derive(Deserialize)]
struct WithCsrf<T> {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(flatten)]
    fields: T,
}

/// A form with no fields but the CSRF token.
#[derive(Deserialize)]
pub struct NoFields {}

impl<T: DeserializeOwned + Send> FromRequest<ApiState> for ConsoleForm<T> {
    type Rejection = ConsoleError;

    async fn from_request(request: Request, state: &ApiState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let session = Session::from_request_parts(&mut parts, state).await?;
        let request = Request::from_parts(parts, body);
        let Form(form) = Form::<WithCsrf<T>>::from_request(request, state)
            .await
            .map_err(|rejection| ConsoleError::BadRequest(rejection.body_text()))?;
        match form.csrf {
            Some(token) if same(&token, session.csrf()) => Ok(ConsoleForm { session, fields: form.fields }),
            _ => Err(ConsoleError::Forbidden(
                "This form did not come from your console session (missing or wrong CSRF token). \
                 Reload the page and try again."
                    .into(),
            )),
        }
    }
}

#[derive(Deserialize)]
pub struct LoginPageQuery {
    #[serde(default)]
    expired: Option<String>,
}

/// The sign-in form, with a fresh double-submit CSRF token.
pub async fn login_page(headers: HeaderMap, Query(query): Query<LoginPageQuery>) -> Response {
    let notice = query.expired.map(|_| "Your session has expired; please sign in again.");
    login_form(&headers, StatusCode::OK, notice, "")
}

fn login_form(headers: &HeaderMap, status: StatusCode, notice: Option<&str>, email: &str) -> Response {
    let token = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 24]>());
    let body = html! {
        form.card.login method="post" action="/console/login" {
            h1 { "Sign in to RelayOps" }
            @if let Some(notice) = notice { p.notice { (notice) } }
            input type="hidden" name="csrf" value=(token);
            label { "Email" input type="email" name="email" required autocomplete="username" value=(email); }
            label { "Password" input type="password" name="password" required autocomplete="current-password"; }
            button type="submit" { "Sign in" }
        }
    };
    let cookie = set_cookie(LOGIN_CSRF_COOKIE, &token, 3600, over_https(headers));
    (status, [(header::SET_COOKIE, cookie)], layout::bare_page_with("Sign in", body)).into_response()
}

#[derive(Deserialize)]
pub struct LoginFields {
    #[serde(default)]
    csrf: String,
    email: String,
    password: String,
}

/// Signs in through the API's own login handler and keeps its token in the
/// session cookie.
pub async fn login(
    State(state): State<ApiState>,
    client: ClientAddress,
    headers: HeaderMap,
    Form(fields): Form<LoginFields>,
) -> Response {
    let expected = cookie(&headers, LOGIN_CSRF_COOKIE).unwrap_or_default();
    if expected.is_empty() || !same(&expected, &fields.csrf) {
        return ConsoleError::Forbidden("The sign-in form expired; reload the page and try again.".into())
            .into_response();
    }
    let request = relayops_manage::LoginRequest::new(fields.email.clone(), fields.password);
    let answer = match relayops_manage::login(State(state), client, ApiJson(request)).await {
        Ok(axum::Json(answer)) => answer,
        Err(error @ (ApiError::Unauthenticated(_) | ApiError::Validation(_) | ApiError::RateLimited { .. })) => {
            return login_form(&headers, StatusCode::UNAUTHORIZED, Some(&error.to_string()), &fields.email);
        }
        Err(other) => return ConsoleError::Api(other).into_response(),
    };
    let token = answer.token();
    let lifetime = (answer.expires_at() - Utc::now()).num_seconds().max(1);
    let secure = over_https(&headers);
    (
        StatusCode::SEE_OTHER,
        AppendHeaders([
            (header::LOCATION, "/console/endpoints".to_owned()),
            (header::SET_COOKIE, set_cookie(SESSION_COOKIE, token, lifetime, secure)),
            // The sign-in form's token is used up.
            (header::SET_COOKIE, set_cookie(LOGIN_CSRF_COOKIE, "", 0, secure)),
        ]),
    )
        .into_response()
}

/// Ends the session (server-side: its token is refused from now on,
/// wherever it is presented) and forgets it in this browser.
pub async fn logout(State(state): State<ApiState>, form: ConsoleForm<NoFields>) -> Response {
    signed_out(&state, &form.session, false).await
}

/// Ends every session of the signed-in user, in every browser and client.
pub async fn logout_everywhere(State(state): State<ApiState>, form: ConsoleForm<NoFields>) -> Response {
    signed_out(&state, &form.session, true).await
}

async fn signed_out(state: &ApiState, session: &Session, everywhere: bool) -> Response {
    match end_sessions(state, &session.token, everywhere).await {
        // Ended meanwhile (another tab signed out): as good as done here.
        Ok(_) | Err(ApiError::Unauthorized) => (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, "/console/login".to_owned()), (header::SET_COOKIE, clear_cookie())],
        )
            .into_response(),
        Err(other) => ConsoleError::Api(other).into_response(),
    }
}
