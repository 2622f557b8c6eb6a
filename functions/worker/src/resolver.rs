//! The outbound client's DNS resolver: resolves a host name, drops every
//! address the [`AddressPolicy`] refuses, and hands the rest to the connector —
//! so the address checked is the address connected to (no second lookup a
//! rebinding DNS server could answer differently). URLs with an IP literal skip
//! DNS and are checked by the sender itself.
use std::net::SocketAddr;
use std::sync::Arc;

use relayops_shared::net_policy::{AddressPolicy, BlockedAddress};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Every address of a host was refused.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves only to refused addresses: {first}")]
pub struct HostBlocked {
    pub host: String,
    pub first: BlockedAddress,
}

pub struct GuardedResolver {
    policy: Arc<AddressPolicy>,
}

impl GuardedResolver {
    pub fn new(policy: Arc<AddressPolicy>) -> Self {
        Self { policy }
    }
}

/// Keeps the addresses the policy allows; refuses the host if none is left.
/// Separate from the lookup so that DNS answers of any shape can be tested.
pub fn filter_resolved(
    policy: &AddressPolicy,
    host: &str,
    resolved: impl IntoIterator<Item = SocketAddr>,
) -> Result<Vec<SocketAddr>, HostBlocked> {
    let mut first_refusal = None;
    let allowed: Vec<SocketAddr> = resolved
        .into_iter()
        .filter(|address| match policy.check(address.ip()) {
            Ok(()) => true,
            Err(blocked) => {
                first_refusal.get_or_insert(blocked);
                false
            }
        })
        .collect();
    match (allowed.is_empty(), first_refusal) {
        (true, Some(first)) => Err(HostBlocked { host: host.to_owned(), first }),
        _ => Ok(allowed),
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            // A host opened by name (`host:port`, its port checked by the
            // sender) keeps every address it resolves to.
            let allowed = if policy.host_opened(&host) { resolved } else { filter_resolved(&policy, &host, resolved)? };
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(addresses: &[&str]) -> Vec<SocketAddr> {
        addresses.iter().map(|a| SocketAddr::new(a.parse().unwrap(), 443)).collect()
    }

    #[test]
    fn names_resolving_inward_are_refused_and_mixed_answers_keep_only_public_addresses() {
        let policy = AddressPolicy::default();
        for inward in [
            &["127.0.0.1"][..],
            &["10.0.0.5", "192.168.1.1"],
            &["169.254.169.254"],
            &["::1", "fd00::1"],
            &["::ffff:10.0.0.1"],
            &["64:ff9b::a00:1"],
        ] {
            let refused = filter_resolved(&policy, "evil.example", answer(inward)).unwrap_err();
            assert!(refused.to_string().contains("evil.example"), "{refused}");
        }
        // A rebinding-style answer mixing public and private: only the public one is dialled.
        let kept = filter_resolved(&policy, "mixed.example", answer(&["10.0.0.1", "93.184.215.14", "::1"])).unwrap();
        assert_eq!(kept, answer(&["93.184.215.14"]));
        let allowed =
            AddressPolicy::new(relayops_shared::net_policy::AllowList::nets(vec!["127.0.0.0/8".parse().unwrap()]));
        assert_eq!(filter_resolved(&allowed, "localhost", answer(&["127.0.0.1"])).unwrap().len(), 1);
    }
}
