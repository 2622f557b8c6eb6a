//! Signing in and out, the session, and CSRF protection.
//!
//! Two cookies hold the API's own login token (a JWT from
//! `POST /v1/auth/login`'s handler, naming a login session kept in Postgres),
//! both `HttpOnly`, scoped to `/console`, `Secure` when the request came over
//! HTTPS, living as long as the session may:
//! - `relayops_session`, `SameSite=Lax`, opens pages: a link from another
//!   site (mail, chat, a ticket, the `delivery.dead` webhook's receiver)
//!   opens the page signed in, and pages only read;
//! - `relayops_session_strict`, `SameSite=Strict`, must come with it, equal,
//!   on every state-changing request: a browser sends it only on requests
//!   that started on the console itself, so a form posted from another site
//!   changes nothing even before its CSRF token is looked at.
//!
//! Each
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
//! (a cookie and a form field that must match). The strict cookie is the
//! second line: a cross-site post carries no session cookie at all.
//!
//! A successful sign-in also leaves a known-device cookie (`relayops_device`,
//! `auth::device`, 90 days) that spares this browser the account's sign-in
//! allowance from every address together, so guessing spread over many
//! addresses cannot lock its owner out here; a throttled sign-in answers 429
//! with `Retry-After`.
//!
//! A cookie is cleared only when the request sent one that no longer works;
//! a request without one is sent to the sign-in page and nothing else.
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
use relayops_shared::api::login::{log_in, LoginRequest};
use relayops_shared::api::login_throttle::account_key;
use relayops_shared::api::{by_login_token, end_sessions, ApiError, ApiState, Authenticated, ClientAddress};
use relayops_shared::auth::Scope;
use relayops_shared::ids::TenantId;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{refused_page, ConsoleError};
use crate::layout;

pub const SESSION_COOKIE: &str = "relayops_session";
/// The same token, `SameSite=Strict`: required to change anything.
pub const STRICT_SESSION_COOKIE: &str = "relayops_session_strict";
const LOGIN_CSRF_COOKIE: &str = "relayops_login_csrf";
/// This browser signed in to the account before (`auth::device`).
const DEVICE_COOKIE: &str = "relayops_device";
/// How long a browser stays known after a sign-in.
const DEVICE_DAYS: i64 = 90;
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

    /// The login token the session's cookies hold.
    pub fn token(&self) -> &str {
        &self.token
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

#[derive(Clone, Copy)]
enum SameSite {
    Lax,
    Strict,
}

fn set_cookie(name: &str, value: &str, same_site: SameSite, max_age_secs: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    let same_site = match same_site {
        SameSite::Lax => "Lax",
        SameSite::Strict => "Strict",
    };
    format!("{name}={value}; Path=/console; HttpOnly; SameSite={same_site}; Max-Age={max_age_secs}{secure}")
}

/// Both session cookies, holding `token` for `lifetime_secs`.
fn session_cookies(token: &str, lifetime_secs: i64, secure: bool) -> [String; 2] {
    [
        set_cookie(SESSION_COOKIE, token, SameSite::Lax, lifetime_secs, secure),
        set_cookie(STRICT_SESSION_COOKIE, token, SameSite::Strict, lifetime_secs, secure),
    ]
}

/// Removes both session cookies.
fn cleared_cookies() -> [String; 2] {
    session_cookies("", 0, false)
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

/// A posted form, accepted only with the strict session cookie and the
/// session's CSRF token (`csrf`).
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
        // Sent only by requests that started on the console (see the module).
        let strict = cookie(&parts.headers, STRICT_SESSION_COOKIE).is_some_and(|token| same(&token, &session.token));
        let request = Request::from_parts(parts, body);
        let Form(form) = Form::<WithCsrf<T>>::from_request(request, state)
            .await
            .map_err(|rejection| ConsoleError::BadRequest(rejection.body_text()))?;
        match form.csrf {
            Some(token) if strict && same(&token, session.csrf()) => Ok(ConsoleForm { session, fields: form.fields }),
            _ => Err(ConsoleError::Forbidden(
                "This form did not come from your console session (it was sent from another site, \
                 or without the session's CSRF token). Reload the page and try again."
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
    let cookie = set_cookie(LOGIN_CSRF_COOKIE, &token, SameSite::Strict, 3600, over_https(headers));
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
    let device = cookie(&headers, DEVICE_COOKIE);
    let request = LoginRequest::new(fields.email.clone(), fields.password, device);
    let answer = match log_in(&state, client.0, request).await {
        Ok(answer) => answer,
        Err(error @ (ApiError::Unauthenticated(_) | ApiError::Validation(_))) => {
            return login_form(&headers, StatusCode::UNAUTHORIZED, Some(&error.to_string()), &fields.email);
        }
        Err(error @ ApiError::RateLimited { .. }) => {
            let page = login_form(&headers, StatusCode::TOO_MANY_REQUESTS, Some(&error.to_string()), &fields.email);
            return refused_page(page, &error);
        }
        Err(other) => return ConsoleError::Api(other).into_response(),
    };
    let token = answer.token();
    let lifetime = (answer.expires_at() - Utc::now()).num_seconds().max(1);
    let secure = over_https(&headers);
    let [lax, strict] = session_cookies(token, lifetime, secure);
    let mut cookies = vec![
        lax,
        strict,
        // The sign-in form's token is used up.
        set_cookie(LOGIN_CSRF_COOKIE, "", SameSite::Strict, 0, secure),
    ];
    if let Some(keys) = &state.jwt {
        let max_age = DEVICE_DAYS * 86_400;
        let device = keys.devices().issue(&account_key(&fields.email), Utc::now().timestamp() + max_age);
        cookies.push(set_cookie(DEVICE_COOKIE, &device, SameSite::Strict, max_age, secure));
    }
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/console/endpoints")]).into_response();
    for cookie in cookies {
        if let Ok(value) = cookie.parse() {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
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
        Ok(_) | Err(ApiError::Unauthorized) => to_sign_in_forgetting("/console/login"),
        Err(other) => ConsoleError::Api(other).into_response(),
    }
}

/// To the sign-in page at `location`, removing both session cookies (only
/// for a request that sent ones that no longer work, or that signed out).
pub fn to_sign_in_forgetting(location: &str) -> Response {
    let [lax, strict] = cleared_cookies();
    (
        StatusCode::SEE_OTHER,
        AppendHeaders([
            (header::LOCATION, location.to_owned()),
            (header::SET_COOKIE, lax),
            (header::SET_COOKIE, strict),
        ]),
    )
        .into_response()
}
