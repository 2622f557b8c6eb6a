//! Retryable versus permanent, as a type. The worker's routing uses it, and so
//! does anything that reports failures.
use std::time::Duration;

/// What one HTTP exchange came to, as far as the receiver is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendResult {
    /// The receiver answered with this status.
    Answered { status: u16, retry_after: Option<Duration> },
    /// No answer: connection refused/reset, DNS, TLS, or timeout.
    NoAnswer { timed_out: bool },
    /// Not sent: the endpoint's address is one webhooks may not reach.
    Blocked,
    /// A cloud service (an SQS destination) answered with an error: its
    /// HTTP status, and whether its error code says "not now" (throttling, a
    /// fault on its side, credentials to refresh) rather than "never" (access
    /// denied, no such queue).
    ServiceError { status: u16, retryable: bool },
}

impl SendResult {
    /// The HTTP status the other side answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match *self {
            Self::Answered { status, .. } | Self::ServiceError { status, .. } => Some(status),
            Self::NoAnswer { .. } | Self::Blocked => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx.
    Delivered,
    /// 408, 425, 429, 5xx, timeouts and connection errors: worth another
    /// attempt, no sooner than `not_before` when the receiver said so (on 429
    /// and 503).
    Retryable { not_before: Option<Duration> },
    /// Other 4xx: the receiver refuses this request; retrying will not help.
    /// 410 Gone also disables the endpoint. Also: a redirect (not followed, by
    /// design) and a refused address — both need the endpoint fixed.
    Permanent { disable_endpoint: bool },
}

pub fn classify(result: &SendResult) -> Verdict {
    match *result {
        SendResult::Answered { status: 200..=299, .. } => Verdict::Delivered,
        SendResult::Answered { status: 429 | 503, retry_after } => Verdict::Retryable { not_before: retry_after },
        SendResult::Answered { status: 410, .. } => Verdict::Permanent { disable_endpoint: true },
        // Request Timeout and Too Early say "not now", not "never".
        SendResult::Answered { status: 408 | 425, .. } => Verdict::Retryable { not_before: None },
        SendResult::Answered { status: 300..=499, .. } | SendResult::Blocked => {
            Verdict::Permanent { disable_endpoint: false }
        }
        SendResult::ServiceError { retryable: true, .. } => Verdict::Retryable { not_before: None },
        SendResult::ServiceError { retryable: false, .. } => Verdict::Permanent { disable_endpoint: false },
        // 5xx (and the odd 1xx) are treated as transient.
        SendResult::Answered { .. } | SendResult::NoAnswer { .. } => Verdict::Retryable { not_before: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16) -> SendResult {
        SendResult::Answered { status, retry_after: None }
    }

    #[test]
    fn statuses_are_classified_as_the_spec_says() {
        assert_eq!(classify(&answered(200)), Verdict::Delivered);
        assert_eq!(classify(&answered(204)), Verdict::Delivered);
        assert_eq!(classify(&answered(500)), Verdict::Retryable { not_before: None });
        assert_eq!(classify(&answered(302)), Verdict::Permanent { disable_endpoint: false });
        assert_eq!(classify(&SendResult::Blocked), Verdict::Permanent { disable_endpoint: false });
        assert_eq!(classify(&answered(400)), Verdict::Permanent { disable_endpoint: false });
        assert_eq!(classify(&answered(408)), Verdict::Retryable { not_before: None }, "a timeout, not a refusal");
        assert_eq!(classify(&answered(425)), Verdict::Retryable { not_before: None });
        assert_eq!(classify(&answered(409)), Verdict::Permanent { disable_endpoint: false });
        assert_eq!(classify(&answered(410)), Verdict::Permanent { disable_endpoint: true });
        assert_eq!(classify(&SendResult::NoAnswer { timed_out: true }), Verdict::Retryable { not_before: None });
        let limited = SendResult::Answered { status: 429, retry_after: Some(Duration::from_secs(7)) };
        assert_eq!(classify(&limited), Verdict::Retryable { not_before: Some(Duration::from_secs(7)) });
        let unavailable = SendResult::Answered { status: 503, retry_after: Some(Duration::from_secs(30)) };
        assert_eq!(classify(&unavailable), Verdict::Retryable { not_before: Some(Duration::from_secs(30)) });
        let other_5xx = SendResult::Answered { status: 502, retry_after: Some(Duration::from_secs(30)) };
        assert_eq!(classify(&other_5xx), Verdict::Retryable { not_before: None }, "Retry-After counts on 429/503 only");
        let throttled = SendResult::ServiceError { status: 400, retryable: true };
        assert_eq!(
            classify(&throttled),
            Verdict::Retryable { not_before: None },
            "by the service's code, not its status"
        );
        let denied = SendResult::ServiceError { status: 403, retryable: false };
        assert_eq!(classify(&denied), Verdict::Permanent { disable_endpoint: false });
    }
}
