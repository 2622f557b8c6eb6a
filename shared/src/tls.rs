//! TLS for the connections RelayOps opens itself: Postgres (see `db::target`),
//! and the trust roots shared with RabbitMQ (`amqps://`, lapin) and Redis
//! (`rediss://`), which build their own rustls configurations from the same
//! system store.
//!
//! rustls on *ring*, never aws-lc (a second crypto library in every Lambda
//! binary). Trust comes from the system store, which `SSL_CERT_FILE` /
//! `SSL_CERT_DIR` replace the OpenSSL way, or from a CA file a URL names
//! (`sslrootcert=` for Postgres, e.g. the RDS bundle). Verification failures are
//! errors; nothing here ever falls back to plaintext.
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the CA file {path}: {message}")]
    CaFile { path: PathBuf, message: String },
    #[error("the CA file {0} holds no certificate")]
    EmptyCaFile(PathBuf),
    #[error("no trust roots: the system store (or SSL_CERT_FILE) gave no certificate")]
    NoSystemRoots,
    #[error("building the TLS configuration failed")]
    Config(#[source] rustls::Error),
}

/// Makes *ring* the process's rustls provider, so that crates which build
/// their configuration with `ClientConfig::builder()` (lapin, redis) find it.
/// Idempotent; a provider installed earlier is kept.
pub fn install_crypto_provider() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The system trust store (or what `SSL_CERT_FILE` / `SSL_CERT_DIR` name),
/// loaded once per process: parsing it costs milliseconds per connection
/// otherwise.
pub fn system_roots() -> Result<Arc<RootCertStore>, TlsError> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    if let Some(roots) = ROOTS.get() {
        return Ok(Arc::clone(roots));
    }
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(loaded.certs);
    if roots.is_empty() {
        return Err(TlsError::NoSystemRoots);
    }
    Ok(Arc::clone(ROOTS.get_or_init(|| Arc::new(roots))))
}

/// The certificates of a PEM file (one CA or a bundle such as RDS'
/// `global-bundle.pem`) as trust roots.
pub fn roots_from_pem_file(path: &Path) -> Result<RootCertStore, TlsError> {
    let error = |message: String| TlsError::CaFile { path: path.to_owned(), message };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(certs);
    if roots.is_empty() {
        return Err(TlsError::EmptyCaFile(path.to_owned()));
    }
    Ok(roots)
}

/// What the client checks of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Encryption only: any certificate (libpq's `prefer`/`require` without a root file).
    Nothing,
    /// The chain up to a trusted root, not the host name (libpq's `verify-ca`).
    Chain,
    /// The chain and the host name (libpq's `verify-full`; what amqps/rediss do).
    ChainAndHost,
}

/// A client configuration verifying as asked against `roots`.
pub fn client_config(verify: Verify, roots: Arc<RootCertStore>) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?;
    let config = match verify {
        Verify::ChainAndHost => builder.with_root_certificates(roots).with_no_client_auth(),
        Verify::Chain | Verify::Nothing => {
            let chain = match verify {
                Verify::Chain => Some(
                    WebPkiServerVerifier::builder_with_provider(roots, provider())
                        .build()
                        .map_err(|error| TlsError::Config(rustls::Error::General(error.to_string())))?,
                ),
                _ => None,
            };
            let algorithms = provider().signature_verification_algorithms;
            let verifier = Arc::new(PartialVerifier { chain, algorithms });
            builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth()
        }
    };
    Ok(config)
}

/// `verify-ca` and the unverified modes. Handshake signatures are always
/// checked (the session is still bound to the certificate's key); only the
/// host name (`verify-ca`) or the chain as well (encryption only) is not.
#[derive(Debug)]
struct PartialVerifier {
    /// The chain verifier (`verify-ca`); none for encryption only.
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PartialVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
