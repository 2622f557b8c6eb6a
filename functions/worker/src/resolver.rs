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

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
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
                (true, Some(first)) => Err(Box::new(HostBlocked { host, first }) as _),
                _ => Ok(Box::new(allowed.into_iter()) as Addrs),
            }
        })
    }
}
