//! An HTTP function as a Lambda: the state built once per container from the
//! environment, the function's router, and — when `RELAYOPS_WAKEUP_QUEUE_URL`
//! is set and the crate is built with `sqs` — the SQS publisher wake-up, settled
//! before each response returns (a frozen container would stall the send).
//! Each function's `main.rs` is `lambda_http::run(LambdaHttp::from_env()?.app(router))`.
#[cfg(feature = "sqs")]
use std::sync::Arc;

use axum::Router;

use super::{state_from_env, ApiState};
#[cfg(feature = "sqs")]
use super::{PublisherWakeup, Wakeups};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What an HTTP Lambda serves, assembled once per container.
pub struct LambdaHttp {
    state: ApiState,
    #[cfg(feature = "sqs")]
    sqs: Option<Arc<crate::sqs_wakeup::SqsWakeup>>,
}

impl LambdaHttp {
    /// The pool, auth, ingest limiter and wake-ups from the environment.
    /// Connections are opened lazily; a service that cannot be reached makes
    /// requests fail with 503, never the process panic.
    pub fn from_env() -> Result<Self, BoxError> {
        let state = state_from_env()?;
        #[cfg(feature = "sqs")]
        {
            let sqs = crate::sqs_wakeup::SqsWakeup::from_env()?;
            Ok(Self::new(state, sqs))
        }
        #[cfg(not(feature = "sqs"))]
        {
            if crate::config::WakeupQueueConfig::from_env()?.is_some() {
                tracing::warn!("RELAYOPS_WAKEUP_QUEUE_URL is set but this binary was built without the `sqs` feature");
            }
            Ok(Self { state })
        }
    }

    /// `state` plus the SQS wake-up, when there is one (tests build it this way).
    #[cfg(feature = "sqs")]
    pub fn new(mut state: ApiState, sqs: Option<Arc<crate::sqs_wakeup::SqsWakeup>>) -> Self {
        if let Some(sqs) = &sqs {
            let mut wakeups: Vec<Arc<dyn PublisherWakeup>> = state.wakeup.take().into_iter().collect();
            wakeups.push(sqs.clone());
            state.wakeup = Some(Arc::new(Wakeups(wakeups)));
        }
        Self { state, sqs }
    }

    /// The function's router over this state, ready for `lambda_http::run`.
    pub fn app(self, router: impl FnOnce(ApiState) -> Router) -> Router {
        let app = router(self.state);
        #[cfg(feature = "sqs")]
        if let Some(sqs) = self.sqs {
            return app.layer(axum::middleware::from_fn(move |request, next: axum::middleware::Next| {
                let sqs = Arc::clone(&sqs);
                async move {
                    let response = next.run(request).await;
                    sqs.settle().await;
                    response
                }
            }));
        }
        app
    }
}
