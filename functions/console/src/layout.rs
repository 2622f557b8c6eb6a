//! The page shell (head, navigation, sign-out form) and small pieces every
//! page uses: status badges, times, ids. Everything goes through maud, which
//! escapes every interpolated value.
use axum::response::Html;
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use crate::session::Session;

/// Which section of the navigation a page belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Endpoints,
    Deliveries,
    DeadLetters,
    Events,
    ApiKeys,
    Account,
}

const SECTIONS: [(Section, &str, &str); 6] = [
    (Section::Endpoints, "/console/endpoints", "Endpoints"),
    (Section::Deliveries, "/console/deliveries", "Deliveries"),
    (Section::DeadLetters, "/console/dead-letters", "Dead letters"),
    (Section::Events, "/console/events", "Events"),
    (Section::ApiKeys, "/console/api-keys", "API keys"),
    (Section::Account, "/console/account", "Account"),
];

/// A page that reloads itself (`<meta http-equiv="refresh">`: the console
/// runs no script): after `secs`, from `url`.
pub struct Refresh {
    pub secs: u32,
    pub url: String,
}

fn head(title: &str, refresh: Option<&Refresh>) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            @if let Some(refresh) = refresh { meta http-equiv="refresh" content=(format!("{}; url={}", refresh.secs, refresh.url)); }
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · RelayOps" }
            link rel="stylesheet" href="/console/assets/console.css";
            link rel="icon" type="image/svg+xml" href="/console/assets/favicon.svg";
        }
    }
}

/// A signed-in page: navigation, sign-out, then `body`.
pub fn page(session: &Session, section: Section, title: &str, body: Markup) -> Html<String> {
    refreshing_page(session, section, title, body, None)
}

/// A signed-in page that follows something still changing by reloading itself.
pub fn refreshing_page(
    session: &Session,
    section: Section,
    title: &str,
    body: Markup,
    refresh: Option<Refresh>,
) -> Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, refresh.as_ref()))
            body {
                header.top {
                    a.brand href="/console/endpoints" { "RelayOps" }
                    nav {
                        @for (id, href, label) in SECTIONS {
                            a href=(href) class=[(id == section).then_some("current")] { (label) }
                        }
                    }
                    form.signout method="post" action="/console/logout" {
                        (csrf_field(session))
                        button.link type="submit" { "Sign out" }
                    }
                    form.signout method="post" action="/console/logout-everywhere" {
                        (csrf_field(session))
                        button.link type="submit" title="End every session of yours, in every browser" { "Sign out everywhere" }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    Html(markup.into_string())
}

/// A page without navigation (sign-in, errors).
pub fn bare_page_with(title: &str, body: Markup) -> Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title, None))
            body.bare { main { (body) } }
        }
    };
    Html(markup.into_string())
}

/// An error or notice page with a way back.
pub fn bare_page(title: &str, message: &str) -> Html<String> {
    bare_page_with(
        title,
        html! {
            div.card {
                h1 { (title) }
                p { (message) }
                p { a href="/console/endpoints" { "Back to the console" } }
            }
        },
    )
}

/// The hidden CSRF field every state-changing form carries.
pub fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf()); }
}

/// A delivery status as a coloured badge.
pub fn status_badge(status: &str) -> Markup {
    let class = match status {
        "delivered" => "badge ok",
        "failed" | "dead" => "badge bad",
        "scheduled" | "in_progress" | "parked" => "badge warn",
        _ => "badge",
    };
    html! { span class=(class) { (status.replace('_', " ")) } }
}

/// A time in UTC, to the second, with the full value on hover.
pub fn time(at: DateTime<Utc>) -> Markup {
    html! { time datetime=(at.to_rfc3339()) title=(at.to_rfc3339()) { (at.format("%Y-%m-%d %H:%M:%S")) } }
}

/// "3 min ago"-style age of a past time.
pub fn age(at: DateTime<Utc>) -> String {
    let secs = (Utc::now() - at).num_seconds().max(0);
    match secs {
        0..=59 => format!("{secs} s ago"),
        60..=3599 => format!("{} min ago", secs / 60),
        3600..=86_399 => format!("{} h ago", secs / 3600),
        _ => format!("{} d ago", secs / 86_400),
    }
}

/// A percentage with one decimal, or a dash.
pub fn percent(rate: Option<f64>) -> String {
    rate.map(|rate| format!("{:.1} %", rate * 100.0)).unwrap_or_else(|| "–".into())
}

/// Milliseconds, or a dash.
pub fn millis(value: Option<i32>) -> String {
    value.map(|ms| format!("{ms} ms")).unwrap_or_else(|| "–".into())
}
