//! The connection flow control talks to Redis through: one server (a
//! [`ConnectionManager`], which reconnects by itself) or a cluster in cluster
//! mode (a [`ClusterConnection`], which follows `MOVED`/`ASK` redirects and
//! refreshes its slot map after a failover). Both connect lazily, so a process
//! starts while Redis is down.
//!
//! Cluster mode works because every script touches one key (`KEYS[1]`), so
//! each call lives in that key's hash slot. A future script touching several
//! keys must put them in one slot with a hash tag (`{…}` in each key).
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, TlsCertificates, Value};

use super::breaker::Circuit;
use super::FlowError;
use crate::config::FlowConfig;

/// Redis, alone or as a cluster; cheap to clone (clones share the connection).
#[derive(Clone)]
pub(super) enum RedisConnection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisConnection {
    /// Connects lazily to `config.redis_url`: one server, or every node it
    /// lists as a cluster's seeds when `config.redis_cluster`.
    pub(super) fn open(config: &FlowConfig) -> Result<Self, FlowError> {
        let urls = config.redis_urls();
        let certificates = match ca_file(urls[0]) {
            None => None,
            Some(path) => {
                let root_cert = std::fs::read(&path).map_err(|source| FlowError::CaFile { path, source })?;
                Some(TlsCertificates { client_tls: None, root_cert: Some(root_cert) })
            }
        };
        if config.redis_cluster {
            Ok(Self::Cluster(open_cluster(&urls, certificates, config.redis_timeout)?))
        } else {
            Ok(Self::Single(open_single(urls[0], certificates, config.redis_timeout)?))
        }
    }

    /// The circuit a call on `key` belongs to (`breaker`): its hash slot in
    /// a cluster, so a failed shard degrades only its keys; the one server
    /// otherwise.
    pub(super) fn circuit(&self, key: &str) -> Circuit {
        match self {
            Self::Single(_) => 0,
            Self::Cluster(_) => key_slot(key),
        }
    }
}

fn open_single(
    url: &str,
    certificates: Option<TlsCertificates>,
    timeout: Duration,
) -> Result<ConnectionManager, FlowError> {
    let client = match certificates {
        None => redis::Client::open(url)?,
        Some(certificates) => redis::Client::build_with_tls(url, certificates)?,
    };
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_secs(2));
    Ok(client.get_connection_manager_lazy(manager_config)?)
}

/// A few quick retries: a redirect (`MOVED`/`ASK`, which also refreshes the
/// slot map) or a reconnection after a failover is followed at once; the
/// whole call stays bounded by `RELAYOPS_REDIS_TIMEOUT_MS`, and anything
/// longer is the circuit's business.
fn open_cluster(
    urls: &[&str],
    certificates: Option<TlsCertificates>,
    timeout: Duration,
) -> Result<ClusterConnection, FlowError> {
    let mut builder = ClusterClientBuilder::new(urls.to_vec())
        .retries(3)
        .min_retry_wait(5)
        .max_retry_wait(50)
        .connection_timeout(timeout)
        .response_timeout(timeout);
    if let Some(certificates) = certificates {
        builder = builder.certs(certificates);
    }
    let client = builder.build()?;
    let cluster_config = ClusterConfig::new().set_connection_timeout(timeout).set_response_timeout(timeout);
    Ok(client.get_pending_async_connection_with_config(cluster_config))
}

/// The CA file a `rediss://` URL names with `ssl_ca_certs=`.
fn ca_file(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    url.query_pairs().find(|(key, _)| key == "ssl_ca_certs").map(|(_, value)| value.into_owned())
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

/// The hash slot of `key` in a Redis cluster (CRC16/XMODEM of the key, or of
/// its hash tag: the text between the first `{` and the next `}` when not
/// empty), as `CLUSTER KEYSLOT` answers.
pub(super) fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&byte| byte == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&byte| byte == b'}') {
            Some(length) if length > 0 => &bytes[open + 1..open + 1 + length],
            _ => bytes,
        },
        None => bytes,
    };
    crc16_xmodem(hashed) % 16384
}

fn crc16_xmodem(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_slot_is_what_redis_cluster_keyslot_answers() {
        // Values from `redis-cli cluster keyslot …`.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("relayops:tenant:ten_1"), 5609);
        assert_eq!(key_slot("{user1000}.following"), key_slot("{user1000}.followers"), "one hash tag, one slot");
        assert_eq!(key_slot("foo{}{bar}"), 8363, "an empty tag hashes the whole key");
        assert_eq!(key_slot("123456789"), 0x31C3, "the CRC16/XMODEM check value");
    }
}
