//! Waking publishers in other processes: writers send `NOTIFY relayops_outbox`
//! after committing outbox rows ([`PgNotifier`], debounced per process, none
//! dropped), and
//! every long-lived publisher `LISTEN`s on a dedicated connection
//! ([`wake_on_outbox_inserts`]). Best effort both ways: a lost notification is
//! covered by the publisher's idle interval, and the outbox is the truth.
//!
//! The NOTIFY is sent apart from the writer's transaction on purpose: Postgres
//! serialises the commits of transactions that notify, which under load costs
//! more than the wake-up saves.
use std::sync::Arc;
use std::time::Duration;

use futures_util::{stream, StreamExt};
use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use crate::debounce::{Debounce, Slot};
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

#[derive(Debug, thiserror::Error)]
enum ListenError {
    #[error("Postgres connection settings")]
    Target(#[source] super::target::TargetError),
    #[error("Postgres LISTEN connection")]
    Postgres(#[from] tokio_postgres::Error),
}

async fn listen_once(database_url: &str, notify: &Notify) -> Result<(), ListenError> {
    let target = super::PgTarget::parse(database_url).map_err(ListenError::Target)?;
    let (client, mut connection) = target.connect().await?;
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
                Some(Err(error)) => return Err(error.into()),
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

/// Sends at most one `NOTIFY relayops_outbox` per debounce interval from this
/// process, on a pooled connection, without waiting for it; a wake-up inside
/// the interval is sent at its end, never dropped (see [`Debounce`]).
pub struct PgNotifier {
    pool: crate::db::Pool,
    debounce: Debounce,
}

impl PgNotifier {
    pub fn new(pool: crate::db::Pool) -> Self {
        Self { pool, debounce: Debounce::new(Duration::from_millis(20)) }
    }
}

impl crate::api::PublisherWakeup for PgNotifier {
    fn wake(&self) {
        let wait = match self.debounce.take_slot() {
            Slot::Now => Duration::ZERO,
            Slot::After(wait) => wait,
            Slot::Covered => return,
        };
        let pool = self.pool.clone();
        tokio::spawn(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if let Ok(client) = pool.get().await {
                let _ = client.batch_execute(&format!("NOTIFY {OUTBOX_CHANNEL}")).await;
            }
        });
    }
}
