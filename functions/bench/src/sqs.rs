//! The `sqs` scenario: deliveries/s to an Amazon SQS destination beside the
//! same worker's to a webhook. The bench starts moto's SQS server (the
//! stand-in the tests use), queues the same number of events for a webhook
//! endpoint (the bench's receiver) and for a queue endpoint with no worker
//! running, then times one worker process of its own draining each: from its
//! start until the last delivery is recorded `delivered`.
//!
//! moto is one Python process on the same machine: the SQS figure is bounded
//! by it, and says what the worker costs per queue delivery rather than what
//! AWS would take. The target must run WITHOUT a worker (`relayops api`).
use std::process::Stdio;
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::Credentials;
use serde::Serialize;

use crate::worker_process::ApiOnly;

/// Requests in flight to each endpoint.
const MAX_IN_FLIGHT: u32 = 32;

/// moto's account: queue URLs name it.
const ACCOUNT: &str = "123456789012";

#[derive(Debug, Serialize)]
pub struct SqsFigures {
    pub events: usize,
    pub worker_prefetch: u32,
    /// Each endpoint's `max_in_flight`.
    pub max_in_flight: u32,
    pub webhook: DrainFigures,
    pub sqs: DrainFigures,
    /// The SQS destination's deliveries/s over the webhook's.
    pub sqs_over_webhook: f64,
}

#[derive(Debug, Serialize)]
pub struct DrainFigures {
    pub delivered: i64,
    pub drain_secs: f64,
    pub deliveries_per_sec: f64,
}

pub struct SqsRun<'a> {
    pub api_only: ApiOnly<'a>,
    pub events: usize,
    /// The `moto_server` binary.
    pub moto_server: String,
}

impl SqsRun<'_> {
    pub async fn run(&self) -> anyhow::Result<SqsFigures> {
        let target = self.api_only.target;
        let port = free_port()?;
        let moto_url = format!("http://127.0.0.1:{port}");
        let mut moto = tokio::process::Command::new(&self.moto_server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| {
                anyhow::anyhow!("cannot start {} ({error}): bash scripts/aws-tools.sh", self.moto_server)
            })?;
        let queue = create_queue(&moto_url, self.api_only.timeout).await?;
        eprintln!("[sqs] moto at {moto_url}, queue {queue}");

        // One limit for both: what one moto process answers without its
        // calls timing out (past it, the worker's timeouts and circuits
        // would be measured, not its sends).
        let in_flight = MAX_IN_FLIGHT.min(self.api_only.worker_prefetch);
        let webhook = target.endpoint("hook/sqs-beside", "bench.sqs-webhook", in_flight).await?;
        let body = serde_json::json!({
            "url": format!("https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/bench-sqs"),
            "destination": "aws_sqs",
            "event_types": ["bench.sqs-queue"],
            "max_in_flight": in_flight,
        });
        let queue_endpoint = target.create_endpoint(&body).await?;
        let webhook = self.drain("webhook", "bench.sqs-webhook", &webhook, &moto_url).await?;
        let sqs = self.drain("sqs", "bench.sqs-queue", &queue_endpoint, &moto_url).await?;
        let _ = moto.kill().await;
        Ok(SqsFigures {
            events: self.events,
            worker_prefetch: self.api_only.worker_prefetch,
            max_in_flight: in_flight,
            sqs_over_webhook: sqs.deliveries_per_sec / webhook.deliveries_per_sec.max(f64::MIN_POSITIVE),
            webhook,
            sqs,
        })
    }

    /// Queues the events with no worker, then times a worker's drain of them.
    async fn drain(
        &self,
        label: &str,
        event_type: &str,
        endpoint: &str,
        moto_url: &str,
    ) -> anyhow::Result<DrainFigures> {
        let api_only = &self.api_only;
        eprintln!("[sqs] queueing {} events for the {label} endpoint with no worker running", self.events);
        let (queued, _) = api_only.target.ingest_batches(event_type, self.events, 500, 4).await;
        api_only.wait_for_published_outbox().await?;
        let mut worker = api_only.role("worker");
        worker
            .env("RELAYOPS_WORKER_CONCURRENCY", api_only.worker_prefetch.to_string())
            .env("RELAYOPS_AWS_DESTINATION_ENDPOINT_URL", moto_url)
            .env("AWS_ACCESS_KEY_ID", "bench")
            .env("AWS_SECRET_ACCESS_KEY", "bench");
        let mut worker = worker.spawn()?;
        let started = Instant::now();
        let expected = queued.accepted as i64;
        let delivered = self.wait_for_delivered(endpoint, expected).await;
        let drain_secs = started.elapsed().as_secs_f64();
        let _ = worker.kill().await;
        let delivered = delivered?;
        eprintln!("[sqs] {label}: {delivered} delivered in {drain_secs:.1} s");
        Ok(DrainFigures { delivered, drain_secs, deliveries_per_sec: delivered as f64 / drain_secs.max(1e-9) })
    }

    /// Polls until `expected` of the endpoint's deliveries are `delivered`.
    async fn wait_for_delivered(&self, endpoint: &str, expected: i64) -> anyhow::Result<i64> {
        let id = relayops_shared::api::parse_path_id::<relayops_shared::ids::EndpointId>(endpoint)
            .map_err(|error| anyhow::anyhow!("endpoint id {endpoint}: {error:?}"))?;
        let deadline = Instant::now() + self.api_only.timeout;
        loop {
            let client = self.api_only.pool.get().await?;
            let row = client
                .query_one(
                    "SELECT count(*) FROM relayops.deliveries WHERE endpoint_id = $1 AND status = 'delivered'",
                    &[&id.as_uuid()],
                )
                .await?;
            let delivered: i64 = row.get(0);
            if delivered >= expected {
                return Ok(delivered);
            }
            anyhow::ensure!(Instant::now() < deadline, "{delivered} of {expected} delivered in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Creates the bench's queue once moto answers; its URL.
async fn create_queue(moto_url: &str, timeout: Duration) -> anyhow::Result<String> {
    let credentials = Credentials::new("bench", "bench", None, None, "bench");
    let client = relayops_shared::sqs_wakeup::client(
        "us-east-1".into(),
        Some(credentials),
        Some(moto_url.to_owned()),
        Duration::from_secs(5),
    );
    let deadline = Instant::now() + timeout;
    loop {
        match client.create_queue().queue_name("bench-sqs").send().await {
            Ok(created) => return Ok(created.queue_url().unwrap_or_default().to_owned()),
            Err(error) if Instant::now() > deadline => anyhow::bail!("moto never answered: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
