//! The states of a delivery and the outcomes of one attempt, as stored in the
//! database (`deliveries.status`, `delivery_attempts.outcome`).
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Waiting for its first (or replayed) attempt.
    Pending,
    /// Leased by a worker that is sending it now.
    InProgress,
    /// Waiting for a retry at `next_attempt_at`.
    Scheduled,
    /// Waiting in Postgres, without attempts, for its endpoint: while its
    /// circuit is open (the endpoint kept failing; released when a probe
    /// succeeds), or for a free slot (it had `max_in_flight` requests in
    /// flight; admitted by a worker when one frees).
    Parked,
    /// The receiver answered 2xx.
    Delivered,
    /// Terminal: the receiver refused it (a 4xx other than 408, 425 and 429, or
    /// a 3xx) or the endpoint is gone.
    Failed,
    /// Terminal: retries exhausted; also sent to the operations dead-letter queue.
    Dead,
}

impl DeliveryStatus {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Scheduled => "scheduled",
            Self::Parked => "parked",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
            Self::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "pending" => Self::Pending,
            "in_progress" => Self::InProgress,
            "scheduled" => Self::Scheduled,
            "parked" => Self::Parked,
            "delivered" => Self::Delivered,
            "failed" => Self::Failed,
            "dead" => Self::Dead,
            _ => return None,
        })
    }
}

/// What one attempt led to; also the delivery's next status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    Delivered,
    Retry,
    Failed,
    Dead,
}

impl AttemptOutcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Retry => "retry",
            Self::Failed => "failed",
            Self::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "delivered" => Self::Delivered,
            "retry" => Self::Retry,
            "failed" => Self::Failed,
            "dead" => Self::Dead,
            _ => return None,
        })
    }

    /// The delivery status this outcome leaves behind.
    pub fn next_status(&self) -> DeliveryStatus {
        match self {
            Self::Delivered => DeliveryStatus::Delivered,
            Self::Retry => DeliveryStatus::Scheduled,
            Self::Failed => DeliveryStatus::Failed,
            Self::Dead => DeliveryStatus::Dead,
        }
    }
}
