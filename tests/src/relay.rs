//! A TCP relay on loopback that a test can freeze: while frozen, bytes stop
//! flowing both ways on every connection through it (and on new ones), as
//! in a network partition where packets are lost rather than refused — the
//! peers' sockets stay open and their reads just wait. Thawed, the held bytes
//! go on. Put it between one component and Postgres to cut that component
//! off while the rest of the installation carries on.
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct FreezableRelay {
    pub address: SocketAddr,
    frozen: watch::Sender<bool>,
    accepting: JoinHandle<()>,
}

impl FreezableRelay {
    /// Relays connections to `target` (host and port of a URL such as a
    /// database URL); [`Self::url`] is that URL through the relay.
    pub async fn start(target_url: &str) -> Self {
        let url = url::Url::parse(target_url).expect("target url");
        let target = format!("{}:{}", url.host_str().expect("host"), url.port().unwrap_or(5432));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let address = listener.local_addr().expect("local address");
        let (frozen, _) = watch::channel(false);
        let thawed = frozen.subscribe();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&target).await else { continue };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, thawed.clone()));
                tokio::spawn(pump(server_read, client_write, thawed.clone()));
            }
        });
        Self { address, frozen, accepting }
    }

    /// `url` with its host and port replaced by the relay's.
    pub fn url(&self, url: &str) -> String {
        let mut url = url::Url::parse(url).expect("url");
        url.set_host(Some(&self.address.ip().to_string())).expect("host");
        url.set_port(Some(self.address.port())).expect("port");
        url.to_string()
    }

    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }
}

impl Drop for FreezableRelay {
    fn drop(&mut self) {
        // Open connections drain and end with their peers.
        self.thaw();
        self.accepting.abort();
    }
}

/// Copies `from` to `to`, holding each chunk while the relay is frozen.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut frozen: watch::Receiver<bool>) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if frozen.wait_for(|frozen| !*frozen).await.is_err() || to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
