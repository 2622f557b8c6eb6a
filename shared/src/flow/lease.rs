//! Concurrency leases: a sorted set per endpoint whose members are lease ids
//! scored by their expiry (Redis time). Expired members are dropped before
//! counting, so a worker that died holding a lease blocks nobody for longer
//! than the lease's time to live.
use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::{FlowControl, FlowError};

/// KEYS[1]: lease set. ARGV: lease id, max in flight, ttl ms. Returns 1 if acquired.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local now_parts = redis.call('TIME')
        local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
        local ttl = tonumber(ARGV[3])
        redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
        if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
          redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
          return 1
        end
        if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
          redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
          redis.call('PEXPIRE', KEYS[1], ttl * 2)
          return 1
        end
        return 0
        ",
    )
});

/// KEYS[1]: lease set. Returns how many leases are live (not expired).
static LIVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local now_parts = redis.call('TIME')
        local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
        return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
        ",
    )
});

impl FlowControl {
    /// How many of the leases in the set `key` are live right now.
    pub(super) async fn shared_live_leases(&self, key: String) -> Result<u32, FlowError> {
        let mut connection = self.connection.clone();
        let live: i64 = self.bounded(LIVE.key(key).invoke_async(&mut connection)).await?;
        Ok(live.clamp(0, i64::from(u32::MAX)) as u32)
    }

    /// Takes one of the `max_in_flight` slots of the lease set `key` for `ttl`.
    pub(super) async fn shared_acquire_lease(
        &self,
        key: String,
        lease_id: &str,
        max_in_flight: u32,
        ttl: Duration,
    ) -> Result<bool, FlowError> {
        let mut connection = self.connection.clone();
        let ttl_ms = ttl.as_millis().max(1) as u64;
        let acquired: i64 = self
            .bounded(ACQUIRE.key(key).arg(lease_id).arg(max_in_flight.max(1)).arg(ttl_ms).invoke_async(&mut connection))
            .await?;
        Ok(acquired == 1)
    }

    /// Gives the slot back; a lease already expired is a no-op.
    pub(super) async fn shared_release_lease(&self, key: &str, lease_id: &str) -> Result<(), FlowError> {
        let mut connection = self.connection.clone();
        let _: i64 = self.bounded(redis::cmd("ZREM").arg(key).arg(lease_id).query_async(&mut connection)).await?;
        Ok(())
    }
}
