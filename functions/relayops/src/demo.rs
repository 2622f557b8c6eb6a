//! `relayops demo`: starts every role in this process (as `relayops all`),
//! bootstraps a tenant, then drives the public API like a customer would —
//! endpoints pointing at the simulator, a few events (one repeated with the
//! same idempotency key) — and prints where every delivery ended up, then the
//! console's address and how to sign in (one endpoint's deliveries die, so
//! there is a dead letter to find and replay there).
use std::time::Duration;

use anyhow::{bail, Context};
use relayops_shared::bootstrap::{bootstrap_tenant, BootstrapRequest};
use relayops_shared::config::{DatabaseConfig, ListenConfig};
use relayops_shared::db;
use serde_json::{json, Value};

use crate::roles::{self, Roles};

/// The demo admin's password (the console's sign-in; a demo only).
const DEMO_PASSWORD: &str = "demo-password";

struct Client {
    http: reqwest::Client,
    api: String,
    key: String,
}

impl Client {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<(u16, Value)> {
        let mut request = self.http.request(method, format!("{}{path}", self.api)).bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.with_context(|| format!("calling {path}"))?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.unwrap_or(Value::Null)))
    }
}

async fn wait_until_ready(http: &reqwest::Client, api: &str) -> anyhow::Result<()> {
    for _ in 0..100 {
        if let Ok(response) = http.get(format!("{api}/health/ready")).send().await {
            if response.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the API did not become ready at {api}")
}

pub async fn run(keep_running: bool) -> anyhow::Result<()> {
    if std::env::var("RELAYOPS_JWT_SECRET").is_err() {
        // The console signs in with login tokens; a demo without a configured
        // key gets a random one for this run. Set before any role starts, while
        // nothing else reads the environment.
        let secret: String = rand::random::<[u8; 32]>().iter().map(|byte| format!("{byte:02x}")).collect();
        std::env::set_var("RELAYOPS_JWT_SECRET", secret);
    }
    let listen = ListenConfig::from_env()?;
    let tasks = roles::start(Roles { api: true, publisher: false, worker: true, simulator: true }).await?;
    let api = format!("http://{}", listen.api);
    let simulator = format!("http://{}", listen.simulator);
    let http = reqwest::Client::new();
    wait_until_ready(&http, &api).await?;

    let pool = db::connect_pool(&DatabaseConfig::from_env()?)?;
    let email = format!("demo-{}@example.com", chrono_free_stamp());
    let request = BootstrapRequest { tenant_name: "Demo tenant", admin_email: &email, admin_password: DEMO_PASSWORD };
    let tenant = bootstrap_tenant(&pool, &request).await?;
    let client = Client { http, api: api.clone(), key: tenant.api_key.expose().to_owned() };
    println!("tenant {} with API key {}", tenant.tenant_id, client.key);

    let endpoints = [
        ("/sim/ok", json!({})),
        ("/sim/flaky/1", json!({ "retry_schedule_secs": [1] })),
        ("/sim/status/400", json!({})),
        // Fails twice per delivery, and gives up after two attempts: its
        // deliveries die, and a replay from the console delivers them.
        ("/sim/flaky/2", json!({ "max_attempts": 2, "retry_schedule_secs": [1] })),
    ];
    let mut paths = std::collections::HashMap::new();
    for (path, extra) in endpoints {
        let mut body = json!({ "url": format!("{simulator}{path}"), "event_types": ["order.*"] });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let (status, endpoint) = client.call(reqwest::Method::POST, "/v1/endpoints", Some(body)).await?;
        if status != 201 {
            bail!("creating an endpoint failed ({status}): {endpoint}");
        }
        let secret = endpoint["secret"].as_str().unwrap_or_default();
        client.http.post(format!("{simulator}/_sim/secrets")).json(&json!({ "secret": secret })).send().await?;
        println!("endpoint {} -> {}", endpoint["id"].as_str().unwrap_or("?"), path);
        paths.insert(endpoint["id"].as_str().unwrap_or_default().to_owned(), path);
    }

    let events = [
        json!({ "event_type": "order.created", "payload": { "order_id": 1001, "total": "42.00" }, "idempotency_key": "order-1001" }),
        json!({ "event_type": "order.created", "payload": { "order_id": 1001, "total": "42.00" }, "idempotency_key": "order-1001" }),
        json!({ "event_type": "order.paid", "payload": { "order_id": 1001 } }),
    ];
    let mut event_ids = Vec::new();
    for event in events {
        let (status, receipt) = client.call(reqwest::Method::POST, "/v1/events", Some(event)).await?;
        println!(
            "POST /v1/events -> {status} {} ({} deliveries)",
            receipt["id"].as_str().unwrap_or("?"),
            receipt["deliveries"]
        );
        if status == 201 {
            event_ids.push(receipt["id"].as_str().unwrap_or_default().to_owned());
        }
    }

    println!("\nwaiting for every delivery to settle…");
    let mut rows = Vec::new();
    for _ in 0..200 {
        rows.clear();
        for event_id in &event_ids {
            let (_, list) =
                client.call(reqwest::Method::GET, &format!("/v1/events/{event_id}/deliveries"), None).await?;
            for delivery in list["data"].as_array().cloned().unwrap_or_default() {
                rows.push((event_id.clone(), delivery));
            }
        }
        let settled = rows.iter().all(|(_, d)| matches!(d["status"].as_str(), Some("delivered" | "failed" | "dead")));
        if settled && !rows.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    println!(
        "\n{:<38} {:<16} {:<38} {:<10} {:>8} {:>6}",
        "event", "endpoint", "delivery", "status", "attempts", "http"
    );
    for (event_id, delivery) in &rows {
        println!(
            "{:<38} {:<16} {:<38} {:<10} {:>8} {:>6}",
            event_id,
            paths.get(delivery["endpoint_id"].as_str().unwrap_or_default()).copied().unwrap_or("?"),
            delivery["id"].as_str().unwrap_or("?"),
            delivery["status"].as_str().unwrap_or("?"),
            delivery["attempt_count"].to_string(),
            delivery["last_http_status"].to_string(),
        );
    }
    let received: Value = client.http.get(format!("{simulator}/_sim/received")).send().await?.json().await?;
    let received = received.as_array().cloned().unwrap_or_default();
    let valid = received.iter().filter(|r| r["signature_valid"] == json!(true)).count();
    println!("\nthe simulator received {} requests; {valid} with a valid signature", received.len());
    println!("\nconsole: {api}/console/  (sign in as {email} / {DEMO_PASSWORD})");
    if keep_running {
        println!("\nrelayops is still running (Ctrl-C to stop); open the console above, or try:");
        println!("  curl -s {api}/v1/events -H 'Authorization: Bearer {}'", client.key);
        roles::wait(tasks).await?;
    } else {
        // Ending the process stops every role at once, as Ctrl-C would; nothing
        // is lost (unacked messages return to the queue, leases expire).
        use std::io::Write;
        println!("\n(`cargo run -p relayops -- demo --keep-running` leaves it running to explore)");
        std::io::stdout().flush()?;
        std::process::exit(0);
    }
    Ok(())
}

/// A unique-enough suffix for the demo admin's email, so the demo can run again.
fn chrono_free_stamp() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}
