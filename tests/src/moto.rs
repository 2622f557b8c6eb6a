//! moto's SQS-compatible server on a loopback port, for the wake-up tests: the
//! real HTTP protocol the AWS SDK speaks, no Docker, no AWS account. The binary
//! is `moto_server` from `RELAYOPS_MOTO_SERVER`, the tools venv that
//! `scripts/aws-tools.sh` installs, or `PATH`.
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_sqs::config::Credentials;

use crate::{eventually, WAIT};

pub struct MotoServer {
    child: Child,
    pub endpoint: String,
}

const TOOLS_VENV_BIN: &str = "/var/tmp/relayops-aws-tools/bin/moto_server";

fn moto_binary() -> String {
    if let Ok(path) = std::env::var("RELAYOPS_MOTO_SERVER") {
        return path;
    }
    if std::path::Path::new(TOOLS_VENV_BIN).exists() {
        return TOOLS_VENV_BIN.into();
    }
    "moto_server".into()
}

/// A free loopback port (bound, then released for the child to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr()).expect("free port").port()
}

impl MotoServer {
    /// Starts moto and waits until it answers.
    pub async fn start() -> Self {
        let port = free_port();
        let binary = moto_binary();
        let child = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("cannot start `{binary}` ({error}): run `bash scripts/aws-tools.sh` or set RELAYOPS_MOTO_SERVER")
            });
        let endpoint = format!("http://127.0.0.1:{port}");
        let server = Self { child, endpoint };
        let http = reqwest::Client::new();
        let url = format!("{}/moto-api/", server.endpoint);
        eventually(WAIT, || async {
            match http.get(&url).send().await {
                Ok(_) => Ok(()),
                Err(error) => Err(format!("moto_server not answering at {url}: {error}")),
            }
        })
        .await;
        server
    }

    /// An SQS client for this server (moto accepts any credentials).
    pub fn client(&self) -> aws_sdk_sqs::Client {
        sqs_client(Some(self.endpoint.clone()))
    }

    /// Creates a queue and returns its URL.
    pub async fn create_queue(&self, name: &str) -> String {
        // Setup, not the code under test: patient on a busy machine.
        let credentials = Credentials::new("test", "test", None, None, "tests");
        let setup = relayops_shared::sqs_wakeup::client(
            "us-east-1".into(),
            Some(credentials),
            Some(self.endpoint.clone()),
            Duration::from_secs(15),
        );
        let created = setup.create_queue().queue_name(name).send().await.expect("create queue");
        created.queue_url().expect("queue url").to_owned()
    }
}

/// An SQS client for `endpoint` with test credentials and a 1 s timeout.
pub fn sqs_client(endpoint: Option<String>) -> aws_sdk_sqs::Client {
    let credentials = Credentials::new("test", "test", None, None, "tests");
    relayops_shared::sqs_wakeup::client("us-east-1".into(), Some(credentials), endpoint, Duration::from_secs(1))
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
