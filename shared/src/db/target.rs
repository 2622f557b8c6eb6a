//! A Postgres URL read the way libpq users expect, TLS included.
//!
//! tokio-postgres knows `sslmode=disable|prefer|require` and nothing about
//! verification or `sslrootcert`; we take those two parameters out of the URL
//! (URL or `key=value` form) and build the rustls connector ourselves:
//!
//! | `sslmode` | encrypted | certificate chain | host name |
//! |---|---|---|---|
//! | `disable` | no | – | – |
//! | `prefer` (default) | if the server offers it | no | no |
//! | `require` | yes | only with `sslrootcert=` (as libpq) | no |
//! | `verify-ca` | yes | yes | no |
//! | `verify-full` | yes | yes | yes |
//!
//! Roots: the file `sslrootcert=` names (e.g. RDS' `global-bundle.pem`), or
//! the system store (`SSL_CERT_FILE` replaces it). `allow` is not supported
//! (it is plaintext first), nor client certificates.
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use tokio_postgres::config::SslMode as WireSslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::tls::{self, TlsError, Verify};

/// A connection made by [`PgTarget::connect`]; spawn it to drive the client.
pub type Connection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

/// libpq's `sslmode`, as far as we support it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = TargetError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => return Err(TargetError::SslMode(other.to_owned())),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("sslmode `{0}` is not supported (disable, prefer, require, verify-ca, verify-full)")]
    SslMode(String),
    #[error("invalid Postgres URL")]
    Url(#[source] tokio_postgres::Error),
    #[error("Postgres TLS")]
    Tls(#[source] TlsError),
}

/// Where and how to connect: the connection parameters plus the TLS connector
/// (used only when the mode encrypts).
#[derive(Clone)]
pub struct PgTarget {
    pub config: tokio_postgres::Config,
    pub tls: MakeRustlsConnect,
    pub ssl_mode: SslMode,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config holds the password.
        f.debug_struct("PgTarget").field("ssl_mode", &self.ssl_mode).finish_non_exhaustive()
    }
}

impl PgTarget {
    pub fn parse(url: &str) -> Result<Self, TargetError> {
        let (rest, ssl_mode, root_file) = split_tls_parameters(url)?;
        let mut config = tokio_postgres::Config::from_str(&rest).map_err(TargetError::Url)?;
        config.ssl_mode(match ssl_mode {
            SslMode::Disable => WireSslMode::Disable,
            SslMode::Prefer => WireSslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireSslMode::Require,
        });
        let verify = match (ssl_mode, &root_file) {
            (SslMode::VerifyFull, _) => Verify::ChainAndHost,
            (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Verify::Chain,
            _ => Verify::Nothing,
        };
        let roots = match (&root_file, verify) {
            (_, Verify::Nothing) => Arc::new(rustls::RootCertStore::empty()),
            (Some(path), _) => Arc::new(tls::roots_from_pem_file(path).map_err(TargetError::Tls)?),
            (None, _) => tls::system_roots().map_err(TargetError::Tls)?,
        };
        let client = tls::client_config(verify, roots).map_err(TargetError::Tls)?;
        Ok(Self { config, tls: MakeRustlsConnect::new(client), ssl_mode })
    }

    /// One connection outside any pool (the `LISTEN` connection, tools).
    pub async fn connect(&self) -> Result<(tokio_postgres::Client, Connection), tokio_postgres::Error> {
        self.config.connect(self.tls.clone()).await
    }
}

/// The URL without `sslmode`/`sslrootcert`, and their values.
fn split_tls_parameters(url: &str) -> Result<(String, SslMode, Option<PathBuf>), TargetError> {
    let mut ssl_mode = SslMode::Prefer;
    let mut root_file = None;
    let mut take = |key: &str, value: &str| -> Result<bool, TargetError> {
        match key {
            "sslmode" => ssl_mode = value.parse()?,
            "sslrootcert" => root_file = Some(PathBuf::from(value)),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                    let (key, value) = url::form_urlencoded::parse(pair.as_bytes()).next().unwrap_or_default();
                    if !take(&key, &value)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        // `key=value` form; values with spaces (quoted) are left to tokio-postgres.
        let mut kept = Vec::new();
        for word in url.split_whitespace() {
            match word.split_once('=') {
                Some((key, value)) if take(key.trim(), value.trim_matches('\''))? => {}
                _ => kept.push(word),
            }
        }
        kept.join(" ")
    };
    Ok((rest, ssl_mode, root_file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_leave_the_url_and_everything_else_stays() {
        let (rest, mode, root) = split_tls_parameters(
            "postgres://u:p@db.example:5432/app?sslmode=verify-full&application_name=x&sslrootcert=%2Fopt%2Frds%2Fglobal-bundle.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p@db.example:5432/app?application_name=x");
        assert_eq!(mode, SslMode::VerifyFull);
        assert_eq!(root, Some(PathBuf::from("/opt/rds/global-bundle.pem")));
        let (rest, mode, root) = split_tls_parameters("postgres://u@h/db").unwrap();
        assert_eq!((rest.as_str(), mode, root), ("postgres://u@h/db", SslMode::Prefer, None));
        let (rest, mode, _) = split_tls_parameters("host=h user=u sslmode=verify-ca dbname=d").unwrap();
        assert_eq!((rest.as_str(), mode), ("host=h user=u dbname=d", SslMode::VerifyCa));
        assert!(matches!(split_tls_parameters("postgres://h/d?sslmode=allow"), Err(TargetError::SslMode(_))));
    }

    #[test]
    fn each_mode_maps_to_the_wire_mode_it_needs() {
        let target = PgTarget::parse("postgres://u@127.0.0.1/d?sslmode=disable").unwrap();
        assert_eq!(target.config.get_ssl_mode(), WireSslMode::Disable);
        let target = PgTarget::parse("postgres://u@127.0.0.1/d?sslmode=require").unwrap();
        assert_eq!(target.config.get_ssl_mode(), WireSslMode::Require);
        let target = PgTarget::parse("postgres://u@127.0.0.1/d").unwrap();
        assert_eq!(target.config.get_ssl_mode(), WireSslMode::Prefer);
        // A root file that cannot be read is an error, never plaintext.
        assert!(matches!(
            PgTarget::parse("postgres://u@h/d?sslmode=verify-full&sslrootcert=/nonexistent.pem"),
            Err(TargetError::Tls(_))
        ));
    }
}
