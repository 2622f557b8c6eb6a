//! Which addresses the outbound HTTP client may connect to. Everything that is
//! not ordinary public unicast is refused: loopback, private (RFC 1918), CGNAT,
//! link-local (including the cloud metadata address 169.254.169.254),
//! multicast, broadcast, unspecified, reserved and documentation ranges, IPv6
//! loopback, ULA, link-local, site-local, and IPv4 addresses hidden inside IPv6
//! (mapped, compatible, NAT64, 6to4). An explicit allow-list (off by default)
//! lets development reach a receiver on loopback: whole ranges (CIDRs), or
//! exactly one address and port (`127.0.0.1:8090`, for URLs naming that
//! address), or exactly one host name and port (`relayops:8090`, whatever the
//! name resolves to) — what `relayops all` and docker-compose open for the
//! simulator, so that no other port of its address is reachable.
//!
//! The check is applied to the address actually connected to (see the worker's
//! resolver), so DNS names that resolve inward, rebinding, and odd IP spellings
//! (decimal, octal, hex — normalised by the URL parser) all end up here. The
//! API applies the same judgement to URLs naming an address when an endpoint
//! is created or changed ([`destination`]).
mod destination;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

pub use destination::DestinationRefused;

/// Why an address is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{address} is a {range} address{}, which webhooks may not be sent to", inside.map(|form| format!(" inside {form}")).unwrap_or_default())]
pub struct BlockedAddress {
    pub address: IpAddr,
    pub range: &'static str,
    /// The IPv6 form carrying the IPv4 address `range` is about, if any.
    pub inside: Option<&'static str>,
}

#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    allow: AllowList,
}

/// Special destinations opened anyway (development only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    /// Whole ranges, any port.
    pub nets: Vec<IpNet>,
    /// One address and port, for URLs that name the address literally.
    pub addresses: Vec<SocketAddr>,
    /// One host name (lower case) and port, whatever addresses it resolves to.
    pub hosts: Vec<(String, u16)>,
}

impl AllowList {
    pub fn nets(nets: Vec<IpNet>) -> Self {
        Self { nets, ..Self::default() }
    }

    pub fn addresses(addresses: Vec<SocketAddr>) -> Self {
        Self { addresses, ..Self::default() }
    }
}

/// The `RELAYOPS_OUTBOUND_ALLOW_CIDRS` text this list parses back from.
impl std::fmt::Display for AllowList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nets = self.nets.iter().map(ToString::to_string);
        let addresses = self.addresses.iter().map(ToString::to_string);
        let hosts = self.hosts.iter().map(|(host, port)| format!("{host}:{port}"));
        let entries: Vec<String> = nets.chain(addresses).chain(hosts).collect();
        f.write_str(&entries.join(","))
    }
}

fn v4_range(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified (0.0.0.0/8)",
        (10, _, _) => "private (10.0.0.0/8)",
        (100, 64..=127, _) => "carrier-grade NAT (100.64.0.0/10)",
        (127, _, _) => "loopback (127.0.0.0/8)",
        (169, 254, _) => "link-local / cloud metadata (169.254.0.0/16)",
        (172, 16..=31, _) => "private (172.16.0.0/12)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation (TEST-NET)",
        (192, 88, 99) => "6to4 relay anycast (192.88.99.0/24)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast (224.0.0.0/4)",
        (240..=255, _, _) => "reserved or broadcast (240.0.0.0/4)",
        _ => return None,
    })
}

fn v6_range(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback (::1)");
    }
    Some(match segments[0] {
        0x0100 if segments[1..4] == [0, 0, 0] => "discard-only (100::/64)",
        0x0064 if segments[1] == 0xff9b && segments[2] == 1 => "local-use NAT64 (64:ff9b:1::/48)",
        0x2001 if segments[1] == 0x0db8 => "documentation (2001:db8::/32)",
        0x2001 if segments[1] == 0 => "Teredo (2001::/32)",
        0x2001 if (0x0010..=0x002f).contains(&segments[1]) => "ORCHID (2001:10::/28, 2001:20::/28)",
        0xfc00..=0xfdff => "unique local (fc00::/7)",
        0xfe80..=0xfebf => "link-local (fe80::/10)",
        0xfec0..=0xfeff => "site-local (fec0::/10)",
        0xff00..=0xffff => "multicast (ff00::/8)",
        _ => return None,
    })
}

/// The IPv4 address carried inside an IPv6 one, for the forms that route to it.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated).
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0, 0, _, _] => Some(low),
        // 64:ff9b::a.b.c.d (NAT64 well-known prefix).
        [0x0064, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        // 2002:aabb:ccdd::/48 (6to4).
        [0x2002, high, low_bits, ..] => {
            Some(Ipv4Addr::new((high >> 8) as u8, high as u8, (low_bits >> 8) as u8, low_bits as u8))
        }
        _ => None,
    }
}

/// The special range an address is in, if any.
pub fn special_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_range(v4),
        IpAddr::V6(v6) => v6_range(v6).or_else(|| embedded_v4(v6).and_then(v4_range)),
    }
}

/// The IPv6 form an IPv4 address hides in, named for messages.
fn embedding(ip: Ipv6Addr) -> &'static str {
    match ip.segments() {
        [0, 0, 0, 0, 0, 0xffff, _, _] => "an IPv4-mapped address (::ffff:0:0/96)",
        [0x0064, 0xff9b, ..] => "NAT64 (64:ff9b::/96)",
        [0x2002, ..] => "6to4 (2002::/16)",
        _ => "an IPv4-compatible address (::/96)",
    }
}

/// Why `address` is refused, if it is special.
fn blocked(address: IpAddr) -> Option<BlockedAddress> {
    let range = special_range(address)?;
    let inside = match address {
        IpAddr::V6(v6) if v6_range(v6).is_none() => Some(embedding(v6)),
        _ => None,
    };
    Some(BlockedAddress { address, range, inside })
}

impl AddressPolicy {
    /// `allow`: what may be reached even though special (development).
    pub fn new(allow: AllowList) -> Self {
        Self { allow }
    }

    /// An address about to be connected to (any port): refused when special,
    /// unless an allowed range holds it.
    pub fn check(&self, address: IpAddr) -> Result<(), BlockedAddress> {
        let candidates =
            [Some(address), if let IpAddr::V6(v6) = address { embedded_v4(v6).map(IpAddr::V4) } else { None }];
        if candidates.iter().flatten().any(|ip| self.allow.nets.iter().any(|net| net.contains(ip))) {
            return Ok(());
        }
        match blocked(address) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    }
}

impl AddressPolicy {
    /// A URL naming an IP address (it never reaches the resolver): allowed
    /// when that exact address and port is, else as [`check`](Self::check).
    pub fn check_literal(&self, address: SocketAddr) -> Result<(), BlockedAddress> {
        if self.allow.addresses.contains(&address) {
            return Ok(());
        }
        self.check(address.ip())
    }

    /// Whether the resolver may keep special addresses for this host name:
    /// only names opened by a `host:port` entry (the sender has checked the port).
    pub fn host_opened(&self, host: &str) -> bool {
        self.allow.hosts.iter().any(|(name, _)| name.eq_ignore_ascii_case(host))
    }

    /// A URL naming a host: refused before anything is sent when the name is
    /// opened for other ports only.
    pub fn check_host_port(&self, host: &str, port: u16) -> Result<(), String> {
        if !self.host_opened(host)
            || self.allow.hosts.iter().any(|(name, p)| name.eq_ignore_ascii_case(host) && *p == port)
        {
            return Ok(());
        }
        Err(format!("{host} is allowed on other ports only, not {port}"))
    }
}

/// A CIDR, or a single address as the network of just that address.
pub fn parse_net(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>().ok().or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

/// Parses `RELAYOPS_OUTBOUND_ALLOW_CIDRS`-style text: comma-separated CIDRs,
/// single addresses (any port), `address:port` (`[v6]:port`) or `host:port`.
pub fn parse_allow_list(text: &str) -> Result<AllowList, String> {
    let mut list = AllowList::default();
    for part in text.split(',').map(str::trim).filter(|part| !part.is_empty()) {
        if let Some(net) = parse_net(part) {
            list.nets.push(net);
        } else if let Ok(address) = part.parse::<SocketAddr>() {
            list.addresses.push(address);
        } else if let Some((host, port)) = part.rsplit_once(':').and_then(|(host, port)| {
            let valid = !host.is_empty() && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
            valid.then_some(()).and_then(|()| port.parse::<u16>().ok()).map(|port| (host.to_ascii_lowercase(), port))
        }) {
            list.hosts.push((host, port));
        } else {
            return Err(format!("`{part}` is not a CIDR, an IP address, address:port or host:port"));
        }
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_host(url: &str) -> IpAddr {
        match url::Url::parse(url).unwrap().host().unwrap() {
            url::Host::Ipv4(v4) => IpAddr::V4(v4),
            url::Host::Ipv6(v6) => IpAddr::V6(v6),
            url::Host::Domain(domain) => panic!("{url} parsed as a domain {domain}"),
        }
    }

    /// The address as the URL parser reads it, then the policy's verdict.
    #[test]
    fn every_special_address_spelling_is_refused() {
        let refused = [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://0.0.0.0/",
            "http://0/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://100.64.0.1/",
            "http://100.127.255.254/",
            "http://169.254.169.254/latest/meta-data/",
            "http://169.254.0.1/",
            "http://224.0.0.1/",
            "http://239.255.255.250/",
            "http://255.255.255.255/",
            "http://240.0.0.1/",
            "http://192.0.2.10/",
            "http://198.51.100.7/",
            "http://203.0.113.9/",
            "http://198.18.0.1/",
            "http://192.0.0.8/",
            "http://[::1]/",
            "http://[::]/",
            "http://[0:0:0:0:0:0:0:1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://[::ffff:10.0.0.1]/",
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::127.0.0.1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[64:ff9b:1::1]/",
            "http://[2002:7f00:1::]/",
            "http://[2002:a9fe:a9fe::1]/",
            "http://[fc00::1]/",
            "http://[fd12:3456::1]/",
            "http://[fe80::1]/",
            "http://[fec0::1]/",
            "http://[ff02::1]/",
            "http://[2001:db8::1]/",
            "http://[2001::1]/",
            "http://[100::1]/",
        ];
        let policy = AddressPolicy::default();
        for url in refused {
            let address = url_host(url);
            let blocked = policy.check(address).expect_err(url);
            assert!(!blocked.range.is_empty(), "{url}");
        }
        assert!(refused.len() >= 30);
    }

    #[test]
    fn an_ipv4_address_hidden_in_ipv6_is_named_with_its_form() {
        let policy = AddressPolicy::default();
        for (url, expected) in [
            ("http://[64:ff9b::7f00:1]/", "loopback (127.0.0.0/8) address inside NAT64 (64:ff9b::/96)"),
            ("http://[2002:7f00:1::]/", "loopback (127.0.0.0/8) address inside 6to4 (2002::/16)"),
            ("http://[::ffff:a9fe:a9fe]/", "(169.254.0.0/16) address inside an IPv4-mapped address"),
            ("http://[fd00:ec2::254]/", "unique local (fc00::/7) address, which"),
        ] {
            let message = policy.check(url_host(url)).unwrap_err().to_string();
            assert!(message.contains(expected), "{url}: {message}");
        }
    }

    #[test]
    fn ordinary_public_addresses_pass() {
        let policy = AddressPolicy::default();
        for url in [
            "http://93.184.215.14/",
            "http://8.8.8.8/",
            "http://1.1.1.1/",
            "http://172.32.0.1/",
            "http://100.128.0.1/",
            "http://192.169.0.1/",
            "http://[2606:4700:4700::1111]/",
            "http://[2a00:1450:4001:80b::200e]/",
            "http://[::ffff:8.8.8.8]/",
            "http://[64:ff9b::808:808]/",
            "http://[2002:808:808::1]/",
        ] {
            assert!(policy.check(url_host(url)).is_ok(), "{url} should pass");
        }
    }

    #[test]
    fn the_allow_list_opens_only_what_it_names() {
        let policy = AddressPolicy::new(parse_allow_list("127.0.0.0/8, ::1").unwrap());
        assert!(policy.check(url_host("http://127.0.0.1/")).is_ok());
        assert!(policy.check(url_host("http://[::1]/")).is_ok());
        assert!(policy.check(url_host("http://[::ffff:127.0.0.1]/")).is_ok());
        assert!(policy.check(url_host("http://10.0.0.1/")).is_err());
        assert!(policy.check(url_host("http://169.254.169.254/")).is_err());
        assert!(parse_allow_list("not a cidr").is_err());
        assert_eq!(parse_allow_list("").unwrap(), AllowList::default());
    }

    #[test]
    fn an_address_or_host_with_a_port_opens_exactly_that_port() {
        let list = parse_allow_list("127.0.0.1:8090, [::1]:8090, Relayops:8090").unwrap();
        assert_eq!(list.to_string(), "127.0.0.1:8090,[::1]:8090,relayops:8090");
        assert_eq!(parse_allow_list(&list.to_string()).unwrap(), list);
        let policy = AddressPolicy::new(list);
        assert!(policy.check_literal("127.0.0.1:8090".parse().unwrap()).is_ok());
        assert!(policy.check_literal("127.0.0.1:5432".parse().unwrap()).is_err(), "another port of the address");
        assert!(policy.check_literal("127.0.0.2:8090".parse().unwrap()).is_err());
        assert!(policy.check(url_host("http://127.0.0.1/")).is_err(), "names resolving to it are not opened");
        assert!(policy.host_opened("relayops"));
        assert!(policy.check_host_port("relayops", 8090).is_ok());
        assert!(policy.check_host_port("relayops", 5432).is_err());
        assert!(!policy.host_opened("localhost"));
        assert!(policy.check_host_port("example.com", 443).is_ok(), "other names are left to the resolver's check");
    }
}
