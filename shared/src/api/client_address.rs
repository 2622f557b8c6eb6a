//! The client's address, for limits per client (login throttling). It is the
//! connection's peer (`ConnectInfo`, which the server must provide), unless
//! that peer is a configured trusted proxy (`RELAYOPS_TRUSTED_PROXIES`): then
//! `X-Forwarded-For` is read from the right, skipping trusted proxies, and the
//! first other address is the client — entries further left were written by
//! the client and prove nothing. In the manage and console Lambdas the peer is
//! the source address from API Gateway's request context
//! (`api::lambda_peer::source_ip_as_peer`, layered in their `main.rs`). Without
//! any peer the last `X-Forwarded-For` entry is taken: the one API Gateway
//! appends.
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use ipnet::IpNet;

use super::{ApiError, ApiState};

/// Who is connecting, as far as can be trusted (`None`: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress(pub Option<IpAddr>);

/// The client address of a request from `peer` with these `X-Forwarded-For`
/// values (in header order), trusting only `proxies`.
pub fn client_address(peer: Option<IpAddr>, forwarded_for: &[&str], proxies: &[IpNet]) -> Option<IpAddr> {
    let mut hops = forwarded_for.iter().rev().flat_map(|value| value.rsplit(',')).map(str::trim);
    let Some(peer) = peer else {
        return hops.next().and_then(|hop| hop.parse().ok());
    };
    let trusted = |ip: &IpAddr| proxies.iter().any(|net| net.contains(ip));
    let mut client = peer;
    while trusted(&client) {
        match hops.next().map(str::parse::<IpAddr>) {
            Some(Ok(hop)) => client = hop,
            // No header, or a malformed entry: the last address vouched for.
            _ => break,
        }
    }
    Some(client)
}

impl FromRequestParts<ApiState> for ClientAddress {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|info| info.0.ip());
        let forwarded: Vec<&str> =
            parts.headers.get_all("x-forwarded-for").iter().filter_map(|value| value.to_str().ok()).collect();
        let proxies = state.login_throttle.as_ref().map(|throttle| throttle.trusted_proxies()).unwrap_or_default();
        Ok(Self(client_address(peer, &forwarded, proxies)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies_and_read_from_the_right() {
        let proxies: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let client = ip("203.0.113.7");
        assert_eq!(client_address(Some(client), &["198.51.100.1"], &proxies), Some(client), "not a proxy: ignored");
        assert_eq!(client_address(Some(ip("10.0.0.2")), &["198.51.100.1, 203.0.113.7"], &proxies), Some(client));
        assert_eq!(
            client_address(Some(ip("10.0.0.2")), &["198.51.100.1", "203.0.113.7, 10.0.0.9"], &proxies),
            Some(client),
            "several headers, and a chain of trusted proxies"
        );
        assert_eq!(client_address(Some(ip("10.0.0.2")), &[], &proxies), Some(ip("10.0.0.2")));
        assert_eq!(client_address(Some(ip("10.0.0.2")), &["garbage"], &proxies), Some(ip("10.0.0.2")));
        assert_eq!(client_address(None, &["198.51.100.1, 203.0.113.7"], &[]), Some(client), "API Gateway's entry");
        assert_eq!(client_address(None, &[], &[]), None);
    }
}
