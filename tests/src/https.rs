//! An HTTPS webhook receiver for tests: the simulator's router served over
//! rustls with HTTP/2 and HTTP/1.1 (ALPN), under certificates from a CA made
//! at test time (rcgen). It records what each TLS session negotiated: the SNI
//! the client sent, the ALPN protocol, and the HTTP version of each request.
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::task::JoinHandle;

/// A throwaway CA; its PEM goes to the worker's `RELAYOPS_OUTBOUND_CA_FILE`.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A leaf certificate and its key.
pub struct Leaf {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

/// Which certificate a receiver presents.
pub enum LeafKind<'a> {
    /// Valid now, for these names.
    For(&'a [&'a str]),
    /// For these names, but expired in 2020.
    Expired(&'a [&'a str]),
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = params.self_signed(&key).expect("CA certificate").pem();
        Self { issuer: Issuer::new(params, key), pem }
    }

    pub fn leaf(&self, kind: LeafKind<'_>) -> Leaf {
        let (names, expired) = match kind {
            LeafKind::For(names) => (names, false),
            LeafKind::Expired(names) => (names, true),
        };
        let key = KeyPair::generate().expect("leaf key");
        let mut params =
            CertificateParams::new(names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>()).expect("params");
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let certificate = params.signed_by(&key, &self.issuer).expect("leaf certificate");
        Leaf {
            chain: vec![certificate.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        }
    }

    /// Writes the CA certificate to a file of its own (for the worker's config).
    pub fn write_pem(&self) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("relayops-test-ca-{}.pem", uuid::Uuid::new_v4().simple()));
        std::fs::write(&path, &self.pem).expect("write CA file");
        path
    }
}

/// What one TLS session negotiated.
#[derive(Debug, Clone)]
pub struct Session {
    pub sni: Option<String>,
    pub alpn: Option<String>,
}

/// A running HTTPS receiver on 127.0.0.1.
pub struct HttpsReceiver {
    pub port: u16,
    pub sessions: Arc<Mutex<Vec<Session>>>,
    pub versions: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl HttpsReceiver {
    pub async fn start(leaf: Leaf, router: axum::Router) -> Self {
        let mut config =
            rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_no_client_auth()
                .with_single_cert(leaf.chain, leaf.key)
                .expect("server certificate");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let port = listener.local_addr().expect("address").port();
        let sessions = Arc::new(Mutex::new(Vec::new()));
        let versions = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&versions);
        let router = router.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                recorded.lock().expect("versions").push(format!("{:?}", request.version()));
                next.run(request)
            },
        ));
        let session_log = Arc::clone(&sessions);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let (acceptor, router, session_log) = (acceptor.clone(), router.clone(), Arc::clone(&session_log));
                tokio::spawn(async move {
                    // A client that refuses our certificate ends here.
                    let Ok(tls) = acceptor.accept(stream).await else { return };
                    let (_, connection) = tls.get_ref();
                    session_log.lock().expect("sessions").push(Session {
                        sni: connection.server_name().map(str::to_owned),
                        alpn: connection.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned()),
                    });
                    let service = hyper_util::service::TowerToHyperService::new(router);
                    let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Self { port, sessions, versions, task }
    }

    pub fn sessions(&self) -> Vec<Session> {
        self.sessions.lock().expect("sessions").clone()
    }

    pub fn versions(&self) -> Vec<String> {
        self.versions.lock().expect("versions").clone()
    }
}

impl Drop for HttpsReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
