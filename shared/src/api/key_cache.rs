//! A short-lived, per-process cache of verified API keys, so the common
//! request (ingest) does not spend a query on the key lookup. Entries are keyed
//! by the SHA-256 of the presented secret — never the secret — and only
//! successful verifications are cached (a wrong key always reaches the
//! database).
//!
//! Staleness is bounded by the TTL (`RELAYOPS_API_KEY_CACHE_MS`, default 2 s):
//! a key revoked, or a tenant limit changed, by ANOTHER process takes effect
//! here within that time; a key revoked through this process is forgotten at
//! once. A TTL of zero turns the cache off.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::auth::ApiKeySecret;
use crate::ids::ApiKeyId;
use crate::repo::api_keys::VerifiedApiKey;

/// The default time a verified key is trusted without asking the database.
pub const DEFAULT_TTL: Duration = Duration::from_secs(2);
/// Bound on memory: when full, the cache starts over.
const MAX_ENTRIES: usize = 10_000;

pub struct KeyCache {
    ttl: Duration,
    entries: Mutex<HashMap<[u8; 32], (VerifiedApiKey, Instant)>>,
}

impl KeyCache {
    pub fn new(ttl: Duration) -> Self {
        Self { ttl, entries: Mutex::new(HashMap::new()) }
    }

    /// The verified key for this secret, if it was verified within the TTL.
    pub fn get(&self, presented: &ApiKeySecret) -> Option<VerifiedApiKey> {
        if self.ttl.is_zero() {
            return None;
        }
        let entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (key, verified_at) = entries.get(&presented.hash())?;
        (verified_at.elapsed() < self.ttl).then(|| VerifiedApiKey { last_used_stale: false, ..key.clone() })
    }

    pub fn put(&self, presented: &ApiKeySecret, key: &VerifiedApiKey) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(presented.hash(), (key.clone(), Instant::now()));
    }

    /// Drops a key at once (it was revoked through this process).
    pub fn forget(&self, id: ApiKeyId) {
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        entries.retain(|_, (key, _)| key.id != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TenantId;

    fn verified(id: ApiKeyId) -> VerifiedApiKey {
        VerifiedApiKey {
            id,
            tenant_id: TenantId::new(),
            scopes: Vec::new(),
            ingest_rate_per_sec: None,
            ingest_burst: None,
            tenant_suspended: false,
            last_used_stale: true,
        }
    }

    #[test]
    fn a_verified_key_is_served_until_its_ttl_or_until_forgotten() {
        let cache = KeyCache::new(Duration::from_secs(60));
        let (secret, other) = (ApiKeySecret::generate(), ApiKeySecret::generate());
        let id = ApiKeyId::new();
        assert!(cache.get(&secret).is_none());
        cache.put(&secret, &verified(id));
        let hit = cache.get(&secret).expect("cached");
        assert_eq!(hit.id, id);
        assert!(!hit.last_used_stale, "a cache hit does not write last_used_at again");
        assert!(cache.get(&other).is_none(), "another secret is not this key");
        cache.forget(id);
        assert!(cache.get(&secret).is_none(), "forgotten at once");

        let expired = KeyCache::new(Duration::from_nanos(1));
        expired.put(&secret, &verified(id));
        std::thread::sleep(Duration::from_millis(2));
        assert!(expired.get(&secret).is_none(), "not trusted after the TTL");
        let off = KeyCache::new(Duration::ZERO);
        off.put(&secret, &verified(id));
        assert!(off.get(&secret).is_none(), "a zero TTL turns the cache off");
    }
}
