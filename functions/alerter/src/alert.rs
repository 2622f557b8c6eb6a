//! The alert: what is posted for a dead letter, and posting it. The body is
//! JSON with a `text` line (so a Slack incoming webhook shows it as is) and
//! the dead letter's fields for machines. It carries ids, counts, the last
//! HTTP status and the recorded reason; never payloads, secrets or signatures.
use std::time::Duration;

use relayops_shared::broker::DeadLetter;
use serde_json::{json, Value};

#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("the alert receiver could not be reached")]
    Unreachable(#[source] reqwest::Error),
    #[error("the alert receiver answered {0}")]
    Refused(u16),
}

/// The alert for a readable dead letter.
pub fn dead_letter_alert(letter: &DeadLetter, held_back: u64, cooldown: Duration) -> Value {
    let status = letter.last_http_status.map_or_else(|| "no HTTP answer".to_owned(), |status| format!("HTTP {status}"));
    let mut text = format!(
        "RelayOps: delivery {} to endpoint {} (tenant {}) is dead after {} attempts ({status}): {}",
        letter.delivery_id, letter.endpoint_id, letter.tenant_id, letter.attempts, letter.reason
    );
    if held_back > 0 {
        text.push_str(&format!(" — plus {held_back} more dead deliveries to this endpoint since the last alert"));
    }
    json!({
        "text": text,
        "alert": "dead_letter",
        "tenant_id": letter.tenant_id,
        "endpoint_id": letter.endpoint_id,
        "delivery_id": letter.delivery_id,
        "event_id": letter.event_id,
        "attempts": letter.attempts,
        "last_http_status": letter.last_http_status,
        "reason": letter.reason,
        "suppressed_since_last_alert": held_back,
        "cooldown_secs": cooldown.as_secs(),
    })
}

/// The alert for a message on the DLQ this version cannot read (the
/// publisher routes unknown envelopes there).
pub fn unreadable_alert(bytes: usize, held_back: u64) -> Value {
    json!({
        "text": format!("RelayOps: an unreadable message ({bytes} bytes) reached the dead-letter queue"),
        "alert": "unreadable_dead_letter",
        "suppressed_since_last_alert": held_back,
    })
}

/// Posts the alert; `Ok` only for a 2xx answer.
pub async fn post(http: &reqwest::Client, url: &reqwest::Url, alert: &Value) -> Result<(), AlertError> {
    let response = http.post(url.clone()).json(alert).send().await.map_err(AlertError::Unreachable)?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(AlertError::Refused(response.status().as_u16()))
    }
}
