//! A real headless browser for the console tests: Debian's `chromium` driven
//! through `chromedriver` (WebDriver, on a loopback port of its own) with
//! fantoccini. `scripts/browser.sh` installs both (`make test` runs it).
//! Screenshots go to `<target>/console-screenshots/`.
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

pub struct Browser {
    pub client: Client,
    pub base: String,
    driver: Child,
    profile: PathBuf,
}

/// Where screenshots are saved (created on first use).
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("console-screenshots")
}

impl Browser {
    /// Starts chromedriver and a headless Chromium window of `width` × 900.
    pub async fn start(base: &str, width: u32) -> Self {
        let chromedriver = which("chromedriver")
            .expect("chromedriver is not installed: run `bash scripts/browser.sh` (make test does)");
        let chromium = which("chromium").expect("chromium is not installed: run `bash scripts/browser.sh`");
        let address = crate::free_loopback_address();
        let port = address.rsplit(':').next().expect("port").to_owned();
        // Its own process group, which Chromium joins: stopping the group
        // stops the browser too, also when a test panics.
        let driver = Command::new(chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let webdriver = format!("http://{address}");
        let http = reqwest::Client::new();
        crate::eventually(Duration::from_secs(30), || async {
            match http.get(format!("{webdriver}/status")).send().await {
                Ok(response) if response.status().is_success() => Ok(()),
                other => Err(format!("chromedriver did not answer: {other:?}")),
            }
        })
        .await;
        let profile = std::env::temp_dir().join(format!("relayops-chromium-{}", uuid::Uuid::new_v4().simple()));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", "--disable-extensions", "--hide-scrollbars",
                    format!("--window-size={width},900"),
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&webdriver)
            .await
            .expect("a Chromium session through chromedriver");
        Self { client, base: base.to_owned(), driver, profile }
    }

    pub async fn goto(&self, path: &str) {
        self.client.goto(&format!("{}{path}", self.base)).await.expect("navigate");
    }

    /// The current path (no origin).
    pub async fn path(&self) -> String {
        let url = self.client.current_url().await.expect("current url");
        url.path().to_owned()
    }

    /// The text of the first element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no `{css}`: {e}"));
        element.text().await.expect("element text")
    }

    pub async fn click(&self, css: &str) {
        let element = self.client.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("no `{css}`: {e}"));
        element.click().await.unwrap_or_else(|e| panic!("click `{css}`: {e}"));
    }

    /// Waits (up to 20 s) for an element matching `css`: the sign that a
    /// navigation a click started has arrived.
    pub async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("`{css}` never appeared: {e}"))
    }

    /// Reloads the delivery page at `path` (up to 30 s) until its status reads
    /// `status`: a delivery the pipeline is still working on.
    pub async fn wait_for_delivery_status(&self, path: &str, status: &str) {
        crate::eventually(Duration::from_secs(30), || async {
            self.goto(path).await;
            match self.text("#status").await {
                shown if shown == status => Ok(()),
                other => Err(format!("status {other}")),
            }
        })
        .await;
    }

    /// Waits (up to 30 s), without navigating, for the delivery page shown
    /// to read `status`: the page reloads itself while the delivery is under way.
    pub async fn wait_for_status_shown(&self, status: &str) {
        crate::eventually(Duration::from_secs(30), || async {
            match self.client.find(Locator::Css("#status")).await {
                Ok(element) => match element.text().await {
                    Ok(shown) if shown == status => Ok(()),
                    other => Err(format!("status {other:?}")),
                },
                // Between two loads of the page.
                Err(error) => Err(format!("no status: {error}")),
            }
        })
        .await;
    }

    /// Fills the sign-in form, submits it, and waits for a signed-in page.
    pub async fn sign_in(&self, email: &str, password: &str) {
        self.goto("/console/login").await;
        let form = self.client.form(Locator::Css("form.login")).await.expect("sign-in form");
        form.set_by_name("email", email).await.expect("email");
        form.set_by_name("password", password).await.expect("password");
        form.submit().await.expect("submit");
        self.wait_for("form.signout").await;
    }

    /// Saves a PNG of the window as `<name>.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot directory");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }

    /// Ends the browser session (Chromium quits), then chromedriver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Stops chromedriver's process group — Chromium included — however
        // the test ended; `kill` takes a negative id as a group.
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Another site for cross-site tests: `page` served at `/` from
/// `127.0.0.2` (loopback, but another host, so another site to the browser
/// than the console on `127.0.0.1`); its origin.
pub async fn another_site(page: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0").await.expect("bind 127.0.0.2");
    let address = listener.local_addr().expect("address");
    let router = axum::Router::new().route("/", axum::routing::get(move || async move { axum::response::Html(page) }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}")
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| PathBuf::from(dir).join(program))
        .find(|path| path.is_file())
}
