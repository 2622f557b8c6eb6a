//! The managed-service stand-ins `scripts/tls-services.sh` starts (run by
//! `scripts/services.sh`): TLS-only Postgres, RabbitMQ and Redis whose
//! certificates a throwaway CA signed, a second unrelated CA, and pgbouncer in
//! transaction mode. A missing piece fails the test with what to run, never
//! skips it.
use std::path::Path;

use crate::Services;

pub const TLS_DIR: &str = "/var/tmp/relayops-tls";
pub const PG_TLS_PORT: u16 = 5433;
pub const AMQPS_PORT: u16 = 5671;
pub const RABBITMQ_TLS_NODE: &str = "relayops-tls@localhost";
pub const REDIS_TLS_PORT: u16 = 6380;
pub const PGBOUNCER_PORT: u16 = 6432;

/// The CA that signed every TLS server's certificate.
pub fn ca_file() -> String {
    existing(&format!("{TLS_DIR}/ca.pem"))
}

/// A CA that signed none of them.
pub fn other_ca_file() -> String {
    existing(&format!("{TLS_DIR}/other-ca.pem"))
}

fn existing(path: &str) -> String {
    assert!(Path::new(path).exists(), "{path} is missing: run `bash scripts/services.sh` (it starts the TLS servers)");
    path.to_owned()
}

/// Postgres URLs on the TLS-only server, trusting `ca`.
pub fn postgres_tls_url(database: &str, ssl_mode: &str, ca: &str) -> String {
    format!("postgres://relayops:relayops@127.0.0.1:{PG_TLS_PORT}/{database}?sslmode={ssl_mode}&sslrootcert={ca}")
}

pub fn amqps_url(ca: &str) -> String {
    format!("amqps://guest:guest@127.0.0.1:{AMQPS_PORT}/%2f?cacertfile={ca}")
}

pub fn rediss_url(ca: &str) -> String {
    format!("rediss://127.0.0.1:{REDIS_TLS_PORT}/?ssl_ca_certs={ca}")
}

/// Postgres and RabbitMQ over TLS with full verification (Redis: [`rediss_url`]).
pub fn tls_services() -> Services {
    let ca = ca_file();
    Services {
        admin_database_url: postgres_tls_url("postgres", "verify-full", &ca),
        amqp_url: amqps_url(&ca),
        pooler_url: None,
        reader_port: None,
    }
}

/// The plain services, with the app's pool through pgbouncer.
pub fn pooled_services() -> Services {
    Services {
        pooler_url: Some(format!("postgres://relayops:relayops@127.0.0.1:{PGBOUNCER_PORT}/relayops?sslmode=disable")),
        ..Services::default()
    }
}

/// `rabbitmqctl -n <the TLS node> <args>`'s standard output.
pub fn rabbitmqctl_tls_node(args: &[&str]) -> String {
    crate::rabbitmqctl_on(RABBITMQ_TLS_NODE, args)
}
