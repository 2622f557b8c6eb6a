//! Every setting the chosen roles read, read and checked before any of them
//! starts: a configuration error stops `relayops` with one line naming the
//! variable, before it connects anywhere or migrates a database (and so
//! without the noise of half-started roles shutting down).
use relayops_shared::config::{
    self, AlertConfig, AuthConfig, BackpressureConfig, BrokerConfig, ConfigError, DatabaseConfig, FlowConfig,
    HistoryConfig, IngestConfig, ListenConfig, LoginThrottleConfig, OpsConfig, PublisherConfig, WorkerConfig,
};
use relayops_shared::net_policy::AllowList;

use crate::roles::Roles;

pub struct Settings {
    pub listen: ListenConfig,
    pub ops: OpsConfig,
    /// One allow-list for the worker's connections and the API's endpoint URLs.
    pub outbound_allow: AllowList,
    /// Set when an api, publisher or worker runs.
    pub pipeline: Option<PipelineSettings>,
}

/// What the roles that use Postgres and RabbitMQ read.
pub struct PipelineSettings {
    pub database: DatabaseConfig,
    pub history: HistoryConfig,
    pub broker: BrokerConfig,
    /// Set when a publisher loop runs (always beside an api).
    pub publisher: Option<PublisherConfig>,
    pub api: Option<ApiSettings>,
    pub worker: Option<WorkerConfig>,
    /// Redis: set when an api or a worker runs.
    pub flow: Option<FlowConfig>,
    /// Set for `all` when an alert receiver is configured.
    pub alert: Option<AlertConfig>,
}

pub struct ApiSettings {
    pub auth: AuthConfig,
    pub backpressure: BackpressureConfig,
    pub login_throttle: LoginThrottleConfig,
    pub ingest: IngestConfig,
}

impl Settings {
    pub fn from_env(roles: &Roles) -> Result<Self, ConfigError> {
        let pipeline = (roles.api || roles.publisher || roles.worker).then(|| PipelineSettings::from_env(roles));
        Ok(Self {
            listen: ListenConfig::from_env()?,
            ops: OpsConfig::from_env()?,
            outbound_allow: config::outbound_allow_from_env()?,
            pipeline: pipeline.transpose()?,
        })
    }
}

impl PipelineSettings {
    fn from_env(roles: &Roles) -> Result<Self, ConfigError> {
        let api = roles.api.then(ApiSettings::from_env).transpose()?;
        Ok(Self {
            database: DatabaseConfig::from_env()?,
            history: HistoryConfig::from_env()?,
            broker: BrokerConfig::from_env()?,
            publisher: (roles.api || roles.publisher).then(PublisherConfig::from_env).transpose()?,
            api,
            worker: roles.worker.then(WorkerConfig::from_env).transpose()?,
            flow: (roles.api || roles.worker).then(FlowConfig::from_env).transpose()?,
            alert: if roles.api && roles.worker { AlertConfig::from_env()? } else { None },
        })
    }
}

impl ApiSettings {
    fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            auth: AuthConfig::from_env()?,
            backpressure: BackpressureConfig::from_env()?,
            login_throttle: LoginThrottleConfig::from_env()?,
            ingest: IngestConfig::from_env()?,
        })
    }
}
