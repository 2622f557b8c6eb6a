//! `LISTEN relayops_outbox` on a dedicated connection: every commit that adds
//! outbox rows (a trigger notifies) wakes the local publisher at once, from any
//! process that writes to the same database. Best effort: if the connection
//! drops it is re-opened, and the publisher's idle interval covers the gap.
use std::sync::Arc;
use std::time::Duration;

use futures_util::{stream, StreamExt};
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use crate::telemetry::error_chain;

pub const OUTBOX_CHANNEL: &str = "relayops_outbox";

/// Runs until the process ends, waking `notify` on each notification.
pub async fn wake_on_outbox_inserts(database_url: String, notify: Arc<Notify>) {
    let mut failures: u32 = 0;
    loop {
        match listen_once(&database_url, &notify).await {
            Ok(()) => failures = 0,
            Err(error) => {
                failures = failures.saturating_add(1);
                tracing::warn!(error = %error_chain(&error), "outbox listener failed; reconnecting");
            }
        }
        // Something may have been committed while nobody listened.
        notify.notify_one();
        tokio::time::sleep(Duration::from_millis(250 * 2u64.pow(failures.min(5)))).await;
    }
}

async fn listen_once(database_url: &str, notify: &Notify) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = tokio_postgres::connect(database_url, tokio_postgres::NoTls).await?;
    let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
    let statement = format!("LISTEN {OUTBOX_CHANNEL}");
    let listen = client.batch_execute(&statement);
    // The connection must be polled for the LISTEN to complete.
    tokio::pin!(listen);
    loop {
        tokio::select! {
            result = &mut listen => { result?; break; }
            message = messages.next() => match message {
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(error),
                None => return Ok(()),
            },
        }
    }
    tracing::debug!("listening for outbox inserts");
    // Anything committed before the LISTEN took effect would otherwise wait.
    notify.notify_one();
    while let Some(message) = messages.next().await {
        if let AsyncMessage::Notification(_) = message? {
            notify.notify_one();
        }
    }
    Ok(())
}
