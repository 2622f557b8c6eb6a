//! Which ready queue a tenant's first attempts go to: shuffle sharding over a
//! fixed set of queues, so that one tenant's backlog fills its own queues and
//! not everyone's (SPEC §12; ARCHITECTURE.md, "Fair delivery").
//!
//! With `n` ready queues, `<ns>.ready` (shard 0) takes only a message sent
//! round whose tenant is unknown (what goes round returns to the shard it
//! arrived by: `Topology::return_shard`); with `n` of at least
//! [`MIN_SHARDS_WITH_REFUGE`], the last [`REFUGE_SHARDS`] are the **refuge
//! shards**, and `<ns>.ready.1` up to them are each tenant's own: two per
//! tenant, chosen by a hash of its id. A message goes to the least loaded
//! of its tenant's two (depths sampled by the publisher a few times a
//! second, plus what it sent each lately: `publisher::session`) and, unless
//! its tenant has a backlog (sent more than a few hundred deliveries lately:
//! the publisher's judgement), of the refuge shards too. A tenant with a backlog
//! fills only its own two shards, so another tenant shares a queue with it
//! only if both of its own shards are those two — one chance in
//! `m(m-1)/2` for `m` own shards (21 with the default 10 queues) — and even
//! then its messages go to the refuge shards, which no backlog reaches.
//! Workers consume every shard, each with its own prefetch, so a full shard
//! never holds back the others.
//!
//! With one queue (`RELAYOPS_READY_SHARDS=1`) everything goes to
//! `<ns>.ready`, as before shards existed.
use crate::ids::TenantId;

/// `RELAYOPS_READY_SHARDS`'s default: the returns queue, seven shards
/// shuffled over (21 pairs) and the two refuge shards.
pub const DEFAULT_READY_SHARDS: u16 = 10;
/// How many of the ready queues, the last ones, are the refuge shards.
pub const REFUGE_SHARDS: usize = 2;
/// With fewer ready queues than this there are no refuge shards (they would
/// leave tenants fewer than three shards to be shuffled over).
pub const MIN_SHARDS_WITH_REFUGE: usize = 6;
/// More shards than this buys nothing but broker memory.
pub const MAX_READY_SHARDS: u16 = 64;

/// One ready queue and the routing key that reaches it on `<ns>.work`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyShard {
    pub queue: String,
    pub routing_key: String,
}

/// The ready queues of one namespace: `[0]` is `<ns>.ready`.
#[derive(Debug, Clone)]
pub struct ReadyShards {
    shards: Vec<ReadyShard>,
    /// How many of `shards`, the last ones, are refuge shards (0 or
    /// [`REFUGE_SHARDS`]).
    refuge: usize,
}

impl ReadyShards {
    /// `count` ready queues (at least one) for namespace `ns`; `<ns>.ready`
    /// keeps its routing key `ready`, which the retry queues dead-letter to.
    pub fn new(ns: &str, count: u16) -> Self {
        let shards = (0..count.max(1))
            .map(|index| match index {
                0 => ReadyShard { queue: format!("{ns}.ready"), routing_key: "ready".to_owned() },
                i => ReadyShard { queue: format!("{ns}.ready.{i}"), routing_key: format!("ready.{i}") },
            })
            .collect::<Vec<_>>();
        let refuge = if shards.len() >= MIN_SHARDS_WITH_REFUGE { REFUGE_SHARDS } else { 0 };
        Self { shards, refuge }
    }

    /// Every ready queue, `<ns>.ready` first.
    pub fn all(&self) -> &[ReadyShard] {
        &self.shards
    }

    /// `<ns>.ready`: everything with one shard; with more, a message sent
    /// round whose tenant is unknown.
    pub fn returns(&self) -> &ReadyShard {
        &self.shards[0]
    }

    /// The refuge shards (indexes into [`all`](Self::all)), if there are any.
    pub fn refuge(&self) -> std::ops::Range<usize> {
        self.shards.len() - self.refuge..self.shards.len()
    }

    /// A tenant's own two shards (indexes into [`all`](Self::all)); the
    /// same one twice when there is one to choose from.
    pub fn candidates(&self, tenant: TenantId) -> (usize, usize) {
        let fresh = self.shards.len().saturating_sub(1 + self.refuge);
        if fresh <= 1 {
            let only = self.shards.len() - 1 - self.refuge;
            return (only, only);
        }
        let hash = mix(tenant.as_uuid().as_u128());
        let first = (hash % fresh as u64) as usize;
        let offset = 1 + ((hash / fresh as u64) % (fresh as u64 - 1)) as usize;
        let second = (first + offset) % fresh;
        (first + 1, second + 1)
    }

    /// Where a tenant's next first attempt goes (an index into
    /// [`all`](Self::all)), given the load of each shard (indexed alike;
    /// missing or unmeasured: 0): the least loaded of its own two and,
    /// unless it has a backlog, the refuge shards. Ties go to its first
    /// shard, so without figures a tenant keeps to one queue.
    pub fn choose<L: PartialOrd + Copy + Default>(&self, tenant: TenantId, backlogged: bool, loads: &[L]) -> usize {
        let (first, second) = self.candidates(tenant);
        let refuge = if backlogged { 0..0 } else { self.refuge() };
        let depth = |index: usize| loads.get(index).copied().unwrap_or_default();
        std::iter::once(second)
            .chain(refuge)
            .fold(first, |best, next| if depth(next) < depth(best) { next } else { best })
    }
}

/// A 64-bit mix of a 128-bit id (SplitMix64's finaliser over both halves), so
/// that time-ordered ids spread evenly.
fn mix(value: u128) -> u64 {
    let mut z = (value as u64) ^ ((value >> 64) as u64).rotate_left(32);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn one_shard_is_the_ready_queue_for_everything() {
        let shards = ReadyShards::new("t", 1);
        assert_eq!(shards.all().len(), 1);
        let tenant = TenantId::new();
        assert_eq!(shards.all()[shards.choose::<u32>(tenant, false, &[])].queue, "t.ready");
        assert_eq!(shards.all()[shards.choose::<u32>(tenant, true, &[])].queue, "t.ready", "no refuge shards");
        assert_eq!(shards.returns().routing_key, "ready");
    }

    #[test]
    fn a_tenant_has_two_distinct_first_attempt_shards_and_takes_the_shallower() {
        let shards = ReadyShards::new("t", DEFAULT_READY_SHARDS);
        assert_eq!(shards.all()[3].queue, "t.ready.3");
        assert_eq!(shards.all()[3].routing_key, "ready.3");
        assert_eq!(shards.refuge(), 8..10);
        for _ in 0..1000 {
            let tenant = TenantId::new();
            let (first, second) = shards.candidates(tenant);
            assert_ne!(first, second);
            assert!((1..8).contains(&first) && (1..8).contains(&second), "never the returns or a refuge queue");
            assert_eq!(shards.candidates(tenant), (first, second), "stable");
            let mut depths = [0u32; 10];
            assert_eq!(shards.choose(tenant, false, &depths), first);
            depths[first] = 500;
            depths[second] = 10;
            depths[8] = 10;
            depths[9] = 10;
            assert_eq!(shards.choose(tenant, false, &depths), second);
            assert_eq!(shards.choose(tenant, true, &depths), second);
        }
    }

    #[test]
    fn a_tenant_whose_own_shards_are_busy_takes_refuge_unless_it_has_a_backlog() {
        let shards = ReadyShards::new("t", DEFAULT_READY_SHARDS);
        let tenant = TenantId::new();
        let (first, second) = shards.candidates(tenant);
        let mut depths = [0u32; 10];
        depths[first] = 5_000;
        depths[second] = 4_000;
        depths[8] = 3;
        assert_eq!(shards.choose(tenant, false, &depths), 9, "the emptier refuge shard");
        assert_eq!(shards.choose(tenant, true, &depths), second, "a tenant with a backlog keeps to its own");
        let few = ReadyShards::new("t", 5);
        assert!(few.refuge().is_empty(), "five queues keep all four to be shuffled over");
        let (first, second) = few.candidates(tenant);
        assert!([first, second].contains(&few.choose::<u32>(tenant, false, &[])));
    }

    #[test]
    fn tenants_spread_over_every_pair() {
        let shards = ReadyShards::new("t", DEFAULT_READY_SHARDS);
        let pairs: HashSet<(usize, usize)> = (0..5000)
            .map(|_| {
                let (a, b) = shards.candidates(TenantId::new());
                (a.min(b), a.max(b))
            })
            .collect();
        assert_eq!(pairs.len(), 21, "7 first-attempt shards give 21 pairs, each used");
    }
}
