//! `GET /console/account`: who is signed in, a password change (through the
//! API's own `api::account::change_password`: the current password checked through the
//! sign-in throttle, every other session of the user ended at once, this one
//! kept) and "sign out everywhere".
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use relayops_shared::api::{ApiError, ApiState, ClientAddress, Principal};
use relayops_shared::db::DbError;
use relayops_shared::repo::{users, GenericClient};
use serde::Deserialize;

use crate::error::{refused_page, ConsoleError};
use crate::layout::{self, csrf_field, Section};
use crate::session::{ConsoleForm, Session};

/// What the page says after a change, or why it was refused.
enum Outcome<'a> {
    None,
    Changed(u64),
    Refused(&'a str),
}

async fn page(state: &ApiState, session: &Session, outcome: Outcome<'_>) -> Result<Response, ConsoleError> {
    let client = state.pool.get().await.map_err(DbError::from)?;
    let Some(UserView { email, role }) = user_view(&client, session).await? else {
        return Err(ConsoleError::SignIn { expired: true });
    };
    let body = html! {
        @match outcome {
            Outcome::Changed(ended) => p.notice #password-changed {
                "Password changed. " (ended) " other session" @if ended != 1 { "s" } " of yours ended; this one goes on."
            },
            Outcome::Refused(message) => p.error #password-refused { (message) },
            Outcome::None => {},
        }
        section.card {
            dl.pairs {
                dt { "Signed in as" } dd #email { (email) }
                dt { "Role" } dd { (role) }
            }
        }
        section.card {
            h2 { "Change password" }
            (password_form(session))
        }
        section.card {
            h2 { "Sessions" }
            p.muted { "Signed in on another computer, or left signed in somewhere? End every session of yours, this one included." }
            form method="post" action="/console/logout-everywhere" {
                (csrf_field(session))
                button.danger type="submit" { "Sign out everywhere" }
            }
        }
    };
    Ok(layout::page(session, Section::Account, "Account", body).into_response())
}

/// The signed-in user, as this page shows them.
struct UserView {
    email: String,
    role: String,
}

async fn user_view(client: &impl GenericClient, session: &Session) -> Result<Option<UserView>, DbError> {
    let Principal::User(user) = session.caller.principal else { return Ok(None) };
    let user = users::get_user(client, session.tenant(), user).await?;
    Ok(user.map(|user| UserView { email: user.email, role: user.role }))
}

fn password_form(session: &Session) -> Markup {
    html! {
        form.password method="post" action="/console/account/password" {
            (csrf_field(session))
            label { "Current password" input type="password" name="current_password" required autocomplete="current-password"; }
            label { "New password (10 characters or more)" input type="password" name="new_password" required minlength="10" autocomplete="new-password"; }
            label { "New password again" input type="password" name="confirm_password" required minlength="10" autocomplete="new-password"; }
            button type="submit" { "Change password" }
        }
    }
}

pub async fn show(State(state): State<ApiState>, session: Session) -> Result<Response, ConsoleError> {
    page(&state, &session, Outcome::None).await
}

#[derive(Deserialize)]
pub struct PasswordFields {
    current_password: String,
    new_password: String,
    confirm_password: String,
}

/// Changes the signed-in user's password; the page again, saying how it went.
pub async fn change_password(
    State(state): State<ApiState>,
    ClientAddress(address): ClientAddress,
    form: ConsoleForm<PasswordFields>,
) -> Result<Response, ConsoleError> {
    let session = &form.session;
    let fields = form.fields;
    if fields.new_password != fields.confirm_password {
        let mut refused = page(&state, session, Outcome::Refused("The new passwords differ; nothing changed.")).await?;
        *refused.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
        return Ok(refused);
    }
    let change = relayops_shared::api::account::PasswordChange::new(fields.current_password, fields.new_password);
    match relayops_shared::api::account::change_password(&state, session.token(), address, change).await {
        Ok(ended) => page(&state, session, Outcome::Changed(ended)).await,
        Err(error @ (ApiError::Forbidden(_) | ApiError::Validation(_) | ApiError::RateLimited { .. })) => {
            let message = format!("{}; nothing changed.", capitalised(&error.to_string()));
            Ok(refused_page(page(&state, session, Outcome::Refused(&message)).await?, &error))
        }
        Err(ApiError::Unauthorized) => Err(ConsoleError::SignIn { expired: true }),
        Err(other) => Err(other.into()),
    }
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
}
