//! Holding a message through an outage of our own database. Every requeue of a
//! message counts toward the ready queue's delivery limit (the broker drops a
//! message requeued too often), so while Postgres is unreachable the worker
//! keeps the message unacked and tries again after a growing pause instead of
//! requeueing it every half second: held messages fill the prefetch window, so
//! consuming pauses by itself, and nothing is redelivered in a hot loop. Only a
//! hold that outlasts [`MAX_HOLD`] (well under RabbitMQ's 30-minute consumer
//! timeout) gives the message back.
//!
//! A message that has nevertheless been redelivered close to the limit (a
//! worker crashing on it again and again) is published afresh instead of
//! requeued ([`near_delivery_limit`]), so the broker never drops it; if one is
//! dropped anyway, recovery re-enqueues its `pending` row after the grace.
use std::time::Duration;

use lapin::message::Delivery;
use relayops_shared::broker::DELIVERY_LIMIT;

/// The first pause after a database failure; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const MAX_PAUSE: Duration = Duration::from_secs(15);
/// The longest a message is held before it is given back to the broker.
pub const MAX_HOLD: Duration = Duration::from_secs(600);

/// The pauses of one message's hold.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
    held: Duration,
}

impl Backoff {
    /// The pause before the next try, or `None` once the hold is over.
    pub fn next_pause(&mut self) -> Option<Duration> {
        let pause = FIRST_PAUSE.saturating_mul(1 << self.failures.min(5)).min(MAX_PAUSE);
        if self.held + pause > MAX_HOLD {
            return None;
        }
        self.failures += 1;
        self.held += pause;
        // Up to a fifth less, so held messages do not all retry at once.
        let jitter = rand::random::<f64>() * 0.2;
        Some(pause.mul_f64(1.0 - jitter))
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// How many times the broker has already handed this message out and got it
/// back (quorum queues count it in `x-delivery-count`).
pub fn delivery_count(delivery: &Delivery) -> i64 {
    let headers = delivery.properties.headers().as_ref();
    let count = headers.and_then(|headers| headers.inner().get("x-delivery-count").and_then(as_integer));
    count.unwrap_or(0)
}

fn as_integer(value: &lapin::types::AMQPValue) -> Option<i64> {
    use lapin::types::AMQPValue::*;
    match value {
        LongLongInt(n) => Some(*n),
        LongInt(n) => Some(i64::from(*n)),
        LongUInt(n) => Some(i64::from(*n)),
        ShortInt(n) => Some(i64::from(*n)),
        ShortUInt(n) => Some(i64::from(*n)),
        ShortShortInt(n) => Some(i64::from(*n)),
        ShortShortUInt(n) => Some(i64::from(*n)),
        _ => None,
    }
}

/// Whether one more requeue could make the broker drop the message: leave a
/// margin of two for a crash between here and the ack.
pub fn near_delivery_limit(delivery_count: i64) -> bool {
    delivery_count >= DELIVERY_LIMIT - 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_to_a_cap_and_the_hold_ends() {
        let mut backoff = Backoff::default();
        let pauses: Vec<Duration> = std::iter::from_fn(|| backoff.next_pause()).collect();
        assert!(pauses[0] <= FIRST_PAUSE && pauses[0] >= FIRST_PAUSE.mul_f64(0.8));
        assert!(pauses[1] > pauses[0].mul_f64(1.5), "doubles: {pauses:?}");
        assert!(pauses.iter().all(|pause| *pause <= MAX_PAUSE));
        let held: Duration = pauses.iter().sum();
        assert!(held <= MAX_HOLD && held > MAX_HOLD / 2, "held {held:?}");
        assert!(backoff.next_pause().is_none(), "over once the hold is used up");
    }

    #[test]
    fn the_margin_before_the_delivery_limit() {
        assert!(!near_delivery_limit(0));
        assert!(!near_delivery_limit(DELIVERY_LIMIT - 4));
        assert!(near_delivery_limit(DELIVERY_LIMIT - 3));
        assert!(near_delivery_limit(DELIVERY_LIMIT + 5));
    }
}
