//! RabbitMQ: connecting (lapin on tokio), the topology every role declares
//! idempotently at start-up, and the versioned message envelope.
pub mod envelope;
mod shards;
mod topology;

use std::sync::Arc;

use lapin::uri::AMQPUri;
use lapin::{Channel, Connection, ConnectionProperties};

pub use envelope::{
    message_for, BundledDelivery, DeadLetter, DeliveryBundle, DeliveryTask, Destination, EventDeliveries,
    EventDelivery, QueueMessage, TenantDeliveries, EVENT_DELIVERIES_V1,
};
pub use shards::{ReadyShard, ReadyShards, DEFAULT_READY_SHARDS, MAX_READY_SHARDS};
pub use topology::{RetryBucket, Topology, DELAY_HEADER, DELIVERY_LIMIT, RETRY_DELAYS_MS};

use crate::config::BrokerConfig;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("RELAYOPS_AMQP_URL is not a valid AMQP URL: {0}")]
    Url(String),
    #[error("cannot connect to RabbitMQ")]
    Connect(#[source] lapin::Error),
    #[error("RabbitMQ TLS: cannot read the CA file {path} (`cacertfile=` in RELAYOPS_AMQP_URL)")]
    CaFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the process is stopping: no new RabbitMQ connections")]
    Stopped,
    #[error("cannot open a RabbitMQ channel")]
    Channel(#[source] lapin::Error),
    #[error("declaring the RabbitMQ topology failed")]
    Topology(#[source] lapin::Error),
    /// The broker did not answer a setup step in time (it is overloaded, or
    /// the reply was lost); the caller reconnects.
    #[error("RabbitMQ did not answer within {0:?} while setting up")]
    SetupTimeout(std::time::Duration),
}

/// The most a client waits for the broker to answer its whole setup (connect,
/// channel, declares, qos/confirm mode) before giving up and reconnecting: a
/// reply that never comes (an overloaded broker, a lost frame) must not leave a
/// publisher or worker waiting forever.
pub const SETUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// The largest AMQP frame we ask for unless the URL says otherwise
/// (`?frame_max=`). lapin keeps a receive and a send buffer of 32 frames per
/// connection, so at RabbitMQ's default of 128 KiB each connection held 8 MiB
/// (measured: 31 of an idle `relayops all`'s 49 MiB). Our messages are ids and
/// routing data, well under 1 KiB; a larger one is split into frames.
pub const DEFAULT_FRAME_MAX: u32 = 16 * 1024;

/// The TCP connect timeout unless the URL says otherwise (`?connection_timeout=`).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Opens a connection whose I/O runs on the current tokio runtime, to the
/// first broker node of `RELAYOPS_AMQP_URL` that answers (it may list several,
/// comma-separated: a cluster's nodes). The node this process connected to
/// last is tried first, then the others in order, so the roles of one process
/// stay together and a node that went away is skipped once another answered.
/// A connection to another node than the last logs one WARN naming both.
///
/// `amqps://` URLs connect over TLS (rustls), verifying the chain and the host
/// name against the system store (`SSL_CERT_FILE` replaces it) plus the CA
/// file named by the URL's `cacertfile=` (as in RabbitMQ's own URI spec).
/// A certificate that does not verify fails the connection; there is no
/// fallback to plaintext.
///
/// The connection is remembered so [`close_all`] can close it when the
/// process stops.
pub async fn connect(config: &BrokerConfig, connection_name: &str) -> Result<Arc<Connection>, BrokerError> {
    crate::tls::install_crypto_provider();
    if STOPPED.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(BrokerError::Stopped);
    }
    let urls = node_urls(&config.url);
    let first = LAST_NODE.load(std::sync::atomic::Ordering::Relaxed) % urls.len().max(1);
    let mut last_error = BrokerError::Url("RELAYOPS_AMQP_URL lists no address".into());
    for index in (0..urls.len()).map(|offset| (first + offset) % urls.len()) {
        match connect_node(urls[index], connection_name).await {
            Ok(connection) => {
                let before = LAST_NODE.swap(index, std::sync::atomic::Ordering::Relaxed);
                // The swap makes one connection of those that follow another
                // onto the new node the one that logs it.
                if before != index {
                    tracing::warn!(
                        left = %node_name(urls[before % urls.len()]),
                        joined = %node_name(urls[index]),
                        "RabbitMQ: connected to another node of the cluster"
                    );
                }
                return Ok(remember(connection));
            }
            Err(error @ (BrokerError::Url(_) | BrokerError::CaFile { .. })) => return Err(error),
            Err(error) => last_error = error,
        }
    }
    Err(last_error)
}

/// The connections this process opened. Held here as well as by their
/// owner, so one is never closed by being dropped (lapin then closes it on
/// its I/O thread, unawaited): a connection its owner let go is closed here,
/// awaited, at the next connect or at the stop.
static OPEN: std::sync::Mutex<Vec<Arc<Connection>>> = std::sync::Mutex::new(Vec::new());
/// Set by [`close_all`]: what still runs (a sampler between two samples) may
/// not open another connection.
static STOPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn remember(connection: Connection) -> Arc<Connection> {
    let connection = Arc::new(connection);
    let let_go = {
        let mut open = OPEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (let_go, held): (Vec<_>, Vec<_>) = open.drain(..).partition(|held| Arc::strong_count(held) == 1);
        *open = held;
        open.push(connection.clone());
        let_go
    };
    if !let_go.is_empty() {
        tokio::spawn(close_each(let_go, SETUP_TIMEOUT));
    }
    connection
}

/// Closes every connection of this process that is still open, together,
/// each within `limit`: called once the roles have stopped (or failed to
/// start), before the runtime goes away. Without it, lapin's I/O threads find
/// the runtime shut down under them and log errors about it on every stop.
pub async fn close_all(limit: std::time::Duration) {
    STOPPED.store(true, std::sync::atomic::Ordering::Relaxed);
    let open: Vec<Arc<Connection>> = OPEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..).collect();
    close_each(open, limit).await;
}

/// Whether [`close_all`] has run: the process is stopping and its broker
/// connections are closed (the log filter then drops the client's own noise).
pub fn connections_closed() -> bool {
    STOPPED.load(std::sync::atomic::Ordering::Relaxed)
}

async fn close_each(connections: Vec<Arc<Connection>>, limit: std::time::Duration) {
    let closing =
        connections.iter().filter(|connection| connection.status().connected()).map(|connection| async move {
            let _ = tokio::time::timeout(limit, connection.close(200, "stopping")).await;
        });
    futures_util::future::join_all(closing).await;
}

/// Which of the configured nodes this process connected to last (an index
/// into [`node_urls`]); every role of the process starts from it.
static LAST_NODE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The broker nodes `RELAYOPS_AMQP_URL` lists: one URL, or several separated
/// by commas (each complete, with its own credentials and TLS settings).
pub fn node_urls(url: &str) -> Vec<&str> {
    url.split(',').map(str::trim).filter(|url| !url.is_empty()).collect()
}

/// Checks every node URL of `RELAYOPS_AMQP_URL` parses (at start-up: a typo
/// is a configuration error, not a connection failure found later).
pub fn check_urls(url: &str) -> Result<(), BrokerError> {
    let urls = node_urls(url);
    if urls.is_empty() {
        return Err(BrokerError::Url("RELAYOPS_AMQP_URL lists no address".into()));
    }
    urls.iter().try_for_each(|url| connection_uri(url).map(drop))
}

/// `host:port` of a node URL, for logs (never the credentials).
fn node_name(url: &str) -> String {
    match url.parse::<AMQPUri>() {
        Ok(uri) => format!("{}:{}", uri.authority.host, uri.authority.port),
        Err(_) => "an unparsable address".into(),
    }
}

async fn connect_node(url: &str, connection_name: &str) -> Result<Connection, BrokerError> {
    let properties = ConnectionProperties::default()
        .with_connection_name(connection_name.into())
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio);
    Connection::connect_uri_with_config(connection_uri(url)?, properties, tls_config(url)?)
        .await
        .map_err(BrokerError::Connect)
}

/// The extra trust root the URL names (`cacertfile=`), if any.
fn tls_config(url: &str) -> Result<lapin::tcp::OwnedTLSConfig, BrokerError> {
    let ca_file = url::Url::parse(url)
        .ok()
        .and_then(|url| url.query_pairs().find(|(key, _)| key == "cacertfile").map(|(_, value)| value.into_owned()));
    let cert_chain = match ca_file {
        None => None,
        Some(path) => Some(std::fs::read_to_string(&path).map_err(|source| BrokerError::CaFile { path, source })?),
    };
    Ok(lapin::tcp::OwnedTLSConfig { identity: None, cert_chain })
}

/// The configured URL with our defaults for what it leaves out.
fn connection_uri(url: &str) -> Result<AMQPUri, BrokerError> {
    let mut uri: AMQPUri = url.parse().map_err(BrokerError::Url)?;
    uri.query.frame_max.get_or_insert(DEFAULT_FRAME_MAX);
    uri.query.connection_timeout.get_or_insert(DEFAULT_CONNECT_TIMEOUT_MS);
    Ok(uri)
}

pub async fn open_channel(connection: &Connection) -> Result<Channel, BrokerError> {
    connection.create_channel().await.map_err(BrokerError::Channel)
}

/// How many messages `queue` holds ready (a passive declare). A queue that
/// does not exist fails, and closes `channel` with it: sample on a channel
/// that publishes nothing.
pub async fn queue_depth(channel: &Channel, queue: &str) -> Result<u32, BrokerError> {
    let passive = lapin::options::QueueDeclareOptions { passive: true, ..Default::default() };
    let declared = channel.queue_declare(queue, passive, Default::default()).await.map_err(BrokerError::Channel)?;
    Ok(declared.message_count())
}

/// A new channel on `connection` with publisher confirms on, within
/// [`SETUP_TIMEOUT`].
pub async fn open_confirming_channel(connection: &Connection) -> Result<Channel, BrokerError> {
    let opening = async {
        let channel = open_channel(connection).await?;
        let options = lapin::options::ConfirmSelectOptions::default();
        channel.confirm_select(options).await.map_err(BrokerError::Channel)?;
        Ok(channel)
    };
    tokio::time::timeout(SETUP_TIMEOUT, opening).await.unwrap_or(Err(BrokerError::SetupTimeout(SETUP_TIMEOUT)))
}

/// Closes a publishing channel another has replaced after the broker refused
/// a message on it (ARCHITECTURE.md, "A queue that refuses publishes": a
/// quorum queue whose length limit is removed while it is over it never
/// tells the channels it told to refuse that they may go on, in RabbitMQ
/// 3.10; a new channel starts out allowed). Within [`SETUP_TIMEOUT`]; a
/// failure changes nothing, the channel is out of use either way.
pub async fn close_replaced(channel: Channel) {
    let _ = tokio::time::timeout(SETUP_TIMEOUT, channel.close(200, "replaced after a refusal")).await;
}

/// Runs a consumer until the process ends: `consume` connects and consumes
/// until its stream ends or fails; `consuming` is false between attempts (for
/// readiness); each failure in a row doubles the pause before reconnecting
/// (250 ms up to 8 s), a stream that ended cleanly starts over at once.
pub async fn consume_forever<F, Fut>(role: &str, consuming: &tokio::sync::watch::Sender<bool>, consume: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), BrokerError>>,
{
    consume_until(role, consuming, crate::task::never_stopping(), consume).await
}

/// [`consume_forever`] until `stopping` turns true: `consume` is expected to
/// see it too and return once it has wound down; then this returns instead
/// of reconnecting.
pub async fn consume_until<F, Fut>(
    role: &str,
    consuming: &tokio::sync::watch::Sender<bool>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    mut consume: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), BrokerError>>,
{
    let mut failures: u32 = 0;
    loop {
        let result = consume().await;
        consuming.send_replace(false);
        if *stopping.borrow() {
            return;
        }
        match result {
            Ok(()) => {
                failures = 0;
                tracing::warn!(role, "consumer stream ended; reconnecting");
            }
            Err(error) => {
                failures = failures.saturating_add(1);
                tracing::warn!(role, error = %crate::telemetry::error_chain(&error), "broker connection failed; reconnecting");
            }
        }
        let pause = std::time::Duration::from_millis(250 * 2u64.pow(failures.min(5)));
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = crate::task::stop_requested(&mut stopping) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_keeps_what_it_says_and_gets_small_frames_otherwise() {
        let uri = connection_uri("amqp://guest:guest@127.0.0.1:5672/%2f").unwrap();
        assert_eq!(uri.query.frame_max, Some(DEFAULT_FRAME_MAX));
        assert_eq!(uri.query.connection_timeout, Some(DEFAULT_CONNECT_TIMEOUT_MS));
        assert_eq!(uri.vhost, "/");
        let uri = connection_uri("amqp://u:p@host:5672/v?frame_max=131072&connection_timeout=100").unwrap();
        assert_eq!(uri.query.frame_max, Some(131_072));
        assert_eq!(uri.query.connection_timeout, Some(100));
        assert!(matches!(connection_uri("http://nope"), Err(BrokerError::Url(_))));
    }

    #[test]
    fn a_cluster_is_a_comma_separated_list_of_node_urls_each_checked() {
        let cluster = "amqp://u:p@10.0.0.1:5672/%2f, amqp://u:p@10.0.0.2:5672/%2f,amqps://u:p@b-3.mq:5671/v";
        assert_eq!(node_urls(cluster).len(), 3);
        assert_eq!(node_name(node_urls(cluster)[1]), "10.0.0.2:5672");
        assert!(check_urls(cluster).is_ok());
        assert!(check_urls("amqp://guest:guest@127.0.0.1:5672/%2f").is_ok());
        assert!(matches!(check_urls("amqp://u:p@a:5672/%2f,http://nope"), Err(BrokerError::Url(_))));
        assert!(matches!(check_urls(" , "), Err(BrokerError::Url(_))));
    }
}
