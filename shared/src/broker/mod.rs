//! RabbitMQ: connecting (lapin on tokio), the topology every role declares
//! idempotently at start-up, and the versioned message envelope.
pub mod envelope;
mod topology;

use lapin::{Channel, Connection, ConnectionProperties};

pub use envelope::{DeadLetter, DeliveryTask, Destination, QueueMessage};
pub use topology::{RetryBucket, Topology, RETRY_DELAYS_MS};

use crate::config::BrokerConfig;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("cannot connect to RabbitMQ")]
    Connect(#[source] lapin::Error),
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

/// Opens a connection whose I/O runs on the current tokio runtime.
pub async fn connect(config: &BrokerConfig, connection_name: &str) -> Result<Connection, BrokerError> {
    let properties = ConnectionProperties::default()
        .with_connection_name(connection_name.into())
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio);
    Connection::connect(&config.url, properties).await.map_err(BrokerError::Connect)
}

pub async fn open_channel(connection: &Connection) -> Result<Channel, BrokerError> {
    connection.create_channel().await.map_err(BrokerError::Channel)
}
