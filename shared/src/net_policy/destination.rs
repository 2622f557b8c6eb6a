//! Where an endpoint URL points, judged by one function at both moments it
//! matters, so the two can never disagree: when an endpoint is created or its
//! URL changed (the API refuses a special address with a 422 naming its range),
//! and just before a delivery is sent (the sender's check of URLs that never
//! reach the resolver). A URL naming an IP address is judged on that address and
//! its port; a URL naming a host is judged here only for a `host:port`
//! allow-list entry's port — its addresses are judged when connecting, on what
//! the name resolves to then (the worker's resolver).
use std::net::{IpAddr, SocketAddr};

use url::{Host, Url};

use super::{AddressPolicy, BlockedAddress};

/// Why a URL may not be sent to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationRefused {
    /// The URL names a special address the allow-list does not open.
    #[error(transparent)]
    Special(#[from] BlockedAddress),
    /// The allow-list opens this host name on other ports only.
    #[error("{host} is allowed on other ports only, not {port}")]
    OtherPortOnly { host: String, port: u16 },
}

impl AddressPolicy {
    /// Whether a URL may be sent to, as far as can be told without resolving it.
    pub fn check_destination(&self, url: &Url) -> Result<(), DestinationRefused> {
        let port = url.port_or_known_default().unwrap_or(0);
        let address = match url.host() {
            Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
            Some(Host::Domain(host)) => {
                return self
                    .check_host_port(host, port)
                    .map_err(|_| DestinationRefused::OtherPortOnly { host: host.to_owned(), port })
            }
            None => return Ok(()),
        };
        Ok(self.check_literal(SocketAddr::new(address, port))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net_policy::parse_allow_list;

    fn verdict(policy: &AddressPolicy, url: &str) -> Result<(), DestinationRefused> {
        policy.check_destination(&Url::parse(url).unwrap())
    }

    #[test]
    fn literals_are_judged_with_their_port_and_names_only_for_an_opened_port() {
        let policy = AddressPolicy::new(parse_allow_list("127.0.0.1:8090, 10.1.0.0/16, relayops:8090").unwrap());
        assert!(verdict(&policy, "http://127.0.0.1:8090/hook").is_ok());
        let refused = verdict(&policy, "http://127.0.0.1:5432/").unwrap_err();
        assert!(refused.to_string().contains("loopback (127.0.0.0/8)"), "{refused}");
        assert!(verdict(&policy, "https://10.1.2.3/").is_ok(), "an allowed range, any port");
        assert!(verdict(&policy, "https://10.2.0.1/").is_err());
        assert!(verdict(&policy, "http://relayops:8090/").is_ok());
        assert_eq!(
            verdict(&policy, "http://relayops:5432/"),
            Err(DestinationRefused::OtherPortOnly { host: "relayops".into(), port: 5432 })
        );
        assert!(verdict(&AddressPolicy::default(), "http://localhost/").is_ok(), "names: judged when connecting");
        let metadata = verdict(&AddressPolicy::default(), "http://169.254.169.254/latest/meta-data/").unwrap_err();
        assert!(metadata.to_string().contains("169.254.0.0/16"), "{metadata}");
    }
}
