//! Signing in to the console over plain HTTP, as a browser would (the sign-in
//! form's double-submit token, then the session cookie), for tests about the
//! console's protocol: CSRF refusals, cookies, expiry, tenant isolation.
//! Redirects are not followed, so tests see each 303 and where it points.
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, Response};

/// A signed-in console session.
pub struct ConsoleClient {
    pub base: String,
    pub http: reqwest::Client,
    pub session_cookie: String,
    /// The raw `Set-Cookie` of the session (`SameSite=Lax`), for checking its attributes.
    pub set_cookie: String,
    /// The raw `Set-Cookie` of the strict twin that changes need.
    pub strict_set_cookie: String,
}

/// How a browser sends the session's cookies: both on requests that
/// started on the console, only the `SameSite=Lax` one on a top-level
/// navigation from another site, none on another site's form post.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Initiator {
    SameSite,
    CrossSiteNavigation,
}

/// A cookie's value from a response's `Set-Cookie` headers.
pub fn cookie_from(response: &Response, name: &str) -> Option<(String, String)> {
    response.headers().get_all(SET_COOKIE).iter().filter_map(|value| value.to_str().ok()).find_map(|header| {
        let (pair, _) = header.split_once(';').unwrap_or((header, ""));
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| (value.to_owned(), header.to_owned()))
    })
}

/// The value of the first hidden `csrf` field in a page.
pub fn csrf_in(html: &str) -> Option<String> {
    let start = html.find(r#"name="csrf" value=""#)? + r#"name="csrf" value=""#.len();
    html[start..].split('"').next().map(str::to_owned)
}

pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("http client")
}

/// Fetches the sign-in form and submits it as a browser does (with its
/// double-submit token and cookie), sending `headers` with both requests.
/// The form's `Set-Cookie` for that token, and the answer to the submission.
pub async fn submit_login(
    http: &reqwest::Client,
    base: &str,
    email: &str,
    password: &str,
    headers: &[(&str, &str)],
) -> (String, Response) {
    let url = format!("{base}/console/login");
    let with_headers = |mut request: reqwest::RequestBuilder| {
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request
    };
    let form = with_headers(http.get(&url)).send().await.expect("sign-in page");
    let (login_cookie, login_set_cookie) = cookie_from(&form, "relayops_login_csrf").expect("sign-in csrf cookie");
    let token = csrf_in(&form.text().await.expect("page")).expect("csrf field on the sign-in form");
    let answer = with_headers(http.post(&url))
        .header(COOKIE, format!("relayops_login_csrf={login_cookie}"))
        .form(&[("csrf", token.as_str()), ("email", email), ("password", password)])
        .send()
        .await
        .expect("sign in");
    (login_set_cookie, answer)
}

impl ConsoleClient {
    /// Signs in with the sign-in form; panics unless it succeeds.
    pub async fn sign_in(base: &str, email: &str, password: &str) -> Self {
        let http = no_redirects();
        let (_, answer) = submit_login(&http, base, email, password, &[]).await;
        assert_eq!(answer.status(), 303, "sign-in refused: {:?}", answer.text().await);
        assert_eq!(answer.headers()[LOCATION], "/console/endpoints");
        let (session_cookie, set_cookie) = cookie_from(&answer, "relayops_session").expect("session cookie");
        let (strict, strict_set_cookie) = cookie_from(&answer, "relayops_session_strict").expect("strict cookie");
        assert_eq!(strict, session_cookie, "both cookies hold the session's token");
        Self { base: base.to_owned(), http, session_cookie, set_cookie, strict_set_cookie }
    }

    pub async fn request(&self, method: Method, path: &str, form: Option<&[(&str, &str)]>) -> Response {
        self.request_from(Initiator::SameSite, method, path, form).await
    }

    /// A request with the cookies a browser sends for `initiator`.
    pub async fn request_from(
        &self,
        initiator: Initiator,
        method: Method,
        path: &str,
        form: Option<&[(&str, &str)]>,
    ) -> Response {
        let cookies = match initiator {
            Initiator::SameSite => {
                format!("relayops_session={0}; relayops_session_strict={0}", self.session_cookie)
            }
            Initiator::CrossSiteNavigation => format!("relayops_session={}", self.session_cookie),
        };
        let mut request = self.http.request(method, format!("{}{path}", self.base)).header(COOKIE, cookies);
        if let Some(form) = form {
            request = request.form(form);
        }
        request.send().await.expect("console request")
    }

    /// A page's status and HTML.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let response = self.request(Method::GET, path, None).await;
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// The session's CSRF token, read from a page's forms.
    pub async fn csrf(&self) -> String {
        let (status, page) = self.get("/console/api-keys").await;
        assert_eq!(status, 200, "{page}");
        csrf_in(&page).expect("a form with a csrf field")
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Response {
        self.request(Method::POST, path, Some(form)).await
    }
}
