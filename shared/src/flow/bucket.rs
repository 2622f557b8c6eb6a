//! Shared token buckets in Redis: `rate` tokens per second up to `burst`. The
//! script answers whether a token was taken and, if not, how long until one
//! will be there. A token can be given back (a reservation that turned out not
//! to count, e.g. a login that succeeded) and a bucket forgotten (full again).
use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::{FlowControl, FlowError};

/// KEYS[1]: bucket. ARGV: rate per second, burst, cost. Returns {taken, wait_micros}.
static TAKE_TOKEN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local now_parts = redis.call('TIME')
        local now = tonumber(now_parts[1]) * 1000000 + tonumber(now_parts[2])
        local rate = tonumber(ARGV[1])
        local burst = tonumber(ARGV[2])
        local cost = tonumber(ARGV[3])
        local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
        local tokens = tonumber(state[1])
        local at = tonumber(state[2])
        if tokens == nil or at == nil then
          tokens = burst
          at = now
        end
        tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000000)
        local taken = 0
        local wait = 0
        if tokens >= cost then
          tokens = tokens - cost
          taken = 1
        else
          wait = math.ceil((cost - tokens) * 1000000 / rate)
        end
        redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
        redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
        return {taken, wait}
        ",
    )
});

/// KEYS[1]: bucket. ARGV: burst. Adds one token (at most the burst) to a
/// bucket that exists; a missing bucket is full already.
static GIVE_BACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
        local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens'))
        if tokens == nil then
          return 0
        end
        redis.call('HSET', KEYS[1], 'tokens', tostring(math.min(tonumber(ARGV[1]), tokens + 1)))
        return 1
        ",
    )
});

/// A rate: `per_second` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub per_second: f64,
    pub burst: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenDecision {
    Taken,
    /// No token; one will be there after this long.
    Wait(Duration),
}

impl FlowControl {
    /// Takes `cost` tokens (never more than the burst, which could never fill)
    /// from the shared bucket `key` in Redis.
    pub(super) async fn shared_take_tokens(
        &self,
        key: String,
        limit: Limit,
        cost: u32,
    ) -> Result<TokenDecision, FlowError> {
        let mut connection = self.connection.clone();
        let rate = limit.per_second.max(0.001);
        let burst = limit.burst.max(1);
        let cost = cost.clamp(1, burst);
        let (taken, wait_micros): (i64, i64) =
            self.bounded(TAKE_TOKEN.key(key).arg(rate).arg(burst).arg(cost).invoke_async(&mut connection)).await?;
        Ok(if taken == 1 {
            TokenDecision::Taken
        } else {
            TokenDecision::Wait(Duration::from_micros(wait_micros.max(1) as u64))
        })
    }

    /// Puts one token back into the shared bucket `key`.
    pub(super) async fn shared_give_back(&self, key: String, limit: Limit) -> Result<(), FlowError> {
        let mut connection = self.connection.clone();
        let _: i64 = self.bounded(GIVE_BACK.key(key).arg(limit.burst.max(1)).invoke_async(&mut connection)).await?;
        Ok(())
    }

    /// Drops the shared bucket `key`: it starts full next time.
    pub(super) async fn shared_forget(&self, key: String) -> Result<(), FlowError> {
        let mut connection = self.connection.clone();
        let _: i64 = self.bounded(redis::cmd("DEL").arg(key).query_async(&mut connection)).await?;
        Ok(())
    }
}
