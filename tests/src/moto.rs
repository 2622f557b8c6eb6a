//! moto's SQS-compatible server on a loopback port, for the wake-up and SQS
//! destination tests: the real HTTP protocol the AWS SDK speaks, no Docker,
//! no AWS account. The binary is `moto_server` from `RELAYOPS_MOTO_SERVER`,
//! the tools venv that `scripts/aws-tools.sh` installs, or `PATH`.
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_sqs::config::Credentials;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};

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
        Self::start_on(free_port()).await
    }

    /// Starts moto on `port` (one a test reserved, e.g. to start the service
    /// only after the code under test found it away) and waits until it answers.
    pub async fn start_on(port: u16) -> Self {
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

    /// A client for setup and checks, not the code under test: patient on a
    /// busy machine.
    fn patient_client(&self) -> aws_sdk_sqs::Client {
        let credentials = Credentials::new("test", "test", None, None, "tests");
        relayops_shared::sqs_wakeup::client(
            "us-east-1".into(),
            Some(credentials),
            Some(self.endpoint.clone()),
            Duration::from_secs(15),
        )
    }

    /// Creates a queue and returns its URL.
    pub async fn create_queue(&self, name: &str) -> String {
        let created = self.patient_client().create_queue().queue_name(name).send().await.expect("create queue");
        created.queue_url().expect("queue url").to_owned()
    }

    /// Creates a FIFO queue (`name` ends in `.fifo`) and returns its URL.
    pub async fn create_fifo_queue(&self, name: &str) -> String {
        let created = self
            .patient_client()
            .create_queue()
            .queue_name(name)
            .attributes(QueueAttributeName::FifoQueue, "true")
            .send()
            .await
            .expect("create FIFO queue");
        created.queue_url().expect("queue url").to_owned()
    }

    /// Receives (and deletes) messages from `queue_url` until `count` have
    /// come, with their attributes and system attributes; panics after
    /// [`WAIT`] with fewer, or at once with more.
    pub async fn receive(&self, queue_url: &str, count: usize) -> Vec<Message> {
        let client = self.patient_client();
        let mut received: Vec<Message> = Vec::new();
        let deadline = tokio::time::Instant::now() + WAIT;
        while received.len() < count {
            assert!(tokio::time::Instant::now() < deadline, "{} of {count} messages received", received.len());
            let answer = client
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .expect("receive");
            for message in answer.messages() {
                let handle = message.receipt_handle().unwrap_or_default();
                client.delete_message().queue_url(queue_url).receipt_handle(handle).send().await.expect("delete");
                received.push(message.clone());
            }
        }
        assert_eq!(received.len(), count, "more messages than expected: {received:?}");
        received
    }

    /// Whether `queue_url` holds no message now (visible or in flight).
    pub async fn is_empty(&self, queue_url: &str) -> bool {
        let answer = self
            .patient_client()
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .expect("queue attributes");
        answer.attributes().is_some_and(|attributes| attributes.values().all(|count| count == "0"))
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

/// An error a [`FaultyFront`] answers instead of the service: HTTP status and
/// AWS error code (as the JSON protocol's `__type`).
#[derive(Debug, Clone, Copy)]
pub struct ServiceFault {
    pub status: u16,
    pub code: &'static str,
}

/// What a [`FaultyFront`] does to the calls it gets.
#[derive(Debug, Clone, Default)]
pub struct FrontPlan {
    /// The first calls' answers, in order, instead of moto's.
    pub faults: Vec<ServiceFault>,
    /// Answer the last fault forever once the others are used up.
    pub repeat_last: bool,
    /// Forward the first call at once but answer it only after this long
    /// (the service took the message; its answer is late).
    pub first_answer_after: Option<std::time::Duration>,
    /// Count only calls signed for this service (`sqs`, `sts`) against
    /// `faults`; others are forwarded.
    pub faults_for: Option<&'static str>,
    /// Stand in for a role's trust policy with an `sts:ExternalId`
    /// condition: an `AssumeRole` call without this `ExternalId` is refused
    /// with `AccessDenied`, as AWS refuses it (moto trusts every caller).
    pub trusted_external_id: Option<String>,
}

/// A call a [`FaultyFront`] saw: the AWS service it was signed for and the
/// access key that signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenCall {
    pub service: String,
    pub access_key_id: String,
}

/// A loopback HTTP server in front of moto that answers the first calls with
/// the faults it was given (throttling, a 5xx, access denied: answers moto
/// never gives), or late, and forwards the rest: the faults AWS gives, on the
/// wire.
pub struct FaultyFront {
    pub endpoint: String,
    /// Calls answered so far (faults and forwarded).
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<SeenCall>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultyFront {
    /// Starts in front of `moto`, doing to calls what `plan` says.
    pub async fn start(moto: &MotoServer, plan: FrontPlan) -> Self {
        let FrontPlan { faults, repeat_last, first_answer_after, faults_for, trusted_external_id } = plan;
        let faulted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen_by_handler = std::sync::Arc::clone(&seen);
        use std::sync::atomic::Ordering;
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let upstream = moto.endpoint.clone();
        let http = reqwest::Client::new();
        let counted = std::sync::Arc::clone(&calls);
        let handler = move |request: axum::extract::Request| {
            let (faults, upstream, http, counted) = (faults.clone(), upstream.clone(), http.clone(), counted.clone());
            let (seen, trusted, faulted) = (seen_by_handler.clone(), trusted_external_id.clone(), faulted.clone());
            async move {
                let call = counted.fetch_add(1, Ordering::SeqCst);
                let signed = signed_by(request.headers());
                // The call's place among those the faults count.
                let counts = faults_for.is_none_or(|service| service == signed.service);
                let place = if counts { Some(faulted.fetch_add(1, Ordering::SeqCst)) } else { None };
                seen.lock().expect("seen calls").push(signed.clone());
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(body, 16 * 1024 * 1024).await.expect("request body");
                if let (Some(trusted), "sts") = (&trusted, signed.service.as_str()) {
                    let form: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
                    let given = form.iter().find(|(name, _)| name == "ExternalId").map(|(_, value)| value.as_str());
                    if given != Some(trusted.as_str()) {
                        return access_denied_by_trust_policy();
                    }
                }
                let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(body));
                let fault =
                    place.and_then(|place| faults.get(place).or(if repeat_last { faults.last() } else { None }));
                if let Some(fault) = fault {
                    let body =
                        format!(r#"{{"__type":"com.amazonaws.sqs#{}","message":"injected by the test"}}"#, fault.code);
                    return axum::response::Response::builder()
                        .status(fault.status)
                        .header("content-type", "application/x-amz-json-1.0")
                        .body(axum::body::Body::from(body))
                        .expect("fault response");
                }
                let answer = forward(&http, &upstream, request).await;
                if let (0, Some(late)) = (call, first_answer_after) {
                    tokio::time::sleep(late).await;
                }
                answer
            }
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let router = axum::Router::new().fallback(handler);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self { endpoint, calls, seen, task }
    }

    /// Every call so far: the service and the signing key.
    pub fn seen(&self) -> Vec<SeenCall> {
        self.seen.lock().expect("seen calls").clone()
    }

    /// Calls answered so far.
    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for FaultyFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The service and access key of a SigV4 `Authorization` header
/// (`… Credential=<key>/<date>/<region>/<service>/aws4_request, …`).
fn signed_by(headers: &axum::http::HeaderMap) -> SeenCall {
    let authorization = headers.get("authorization").and_then(|value| value.to_str().ok()).unwrap_or_default();
    let credential =
        authorization.split("Credential=").nth(1).and_then(|rest| rest.split(',').next()).unwrap_or_default();
    let parts: Vec<&str> = credential.split('/').collect();
    SeenCall {
        service: parts.get(3).copied().unwrap_or_default().to_owned(),
        access_key_id: parts.first().copied().unwrap_or_default().to_owned(),
    }
}

/// STS's answer to an `AssumeRole` its trust policy refuses (query protocol).
fn access_denied_by_trust_policy() -> axum::response::Response {
    let body = "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type>\
        <Code>AccessDenied</Code><Message>not authorized to perform sts:AssumeRole (injected by the test)</Message>\
        </Error><RequestId>test</RequestId></ErrorResponse>";
    axum::response::Response::builder()
        .status(403)
        .header("content-type", "text/xml")
        .body(axum::body::Body::from(body))
        .expect("refusal")
}

/// `request` sent on to `upstream`, and its answer back.
async fn forward(http: &reqwest::Client, upstream: &str, request: axum::extract::Request) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 16 * 1024 * 1024).await.expect("request body");
    let path = parts.uri.path_and_query().map(|path| path.as_str()).unwrap_or("/");
    let mut outgoing = http.request(parts.method.clone(), format!("{upstream}{path}")).body(body);
    for (name, value) in &parts.headers {
        if name != "host" && name != "content-length" {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = outgoing.send().await.expect("moto answers");
    let mut response = axum::response::Response::builder().status(answer.status().as_u16());
    for (name, value) in answer.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            response = response.header(name, value);
        }
    }
    response.body(axum::body::Body::from(answer.bytes().await.expect("moto's body"))).expect("forwarded response")
}
