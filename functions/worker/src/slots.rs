//! The worker's delivery slots (`RELAYOPS_WORKER_CONCURRENCY`), shared fairly
//! between tenants: a freed slot goes to the waiting tenant that holds the
//! fewest for its weight ([`TenantWeights`]: a weight-2 tenant holds twice
//! a weight-1 tenant's while both wait), and no tenant holds more than
//! [`TenantShare`] of them while others may come (SPEC §12). A tenant alone still gets all but the
//! reserve, so a lone busy tenant is not held back; a tenant whose receiver
//! is slow (each slot held for seconds) leaves the reserve free for every
//! other tenant's next delivery, and among tenants waiting, the one with
//! the least under way goes first — not whoever queued first.
//!
//! A slot is held from before the claim until the delivery is settled; a
//! [`SlotPermit`] gives it back when dropped (also when a task is aborted).
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use relayops_shared::ids::TenantId;
use tokio::sync::oneshot;

use crate::weights::TenantWeights;

/// The most slots one tenant may hold: all but a sixteenth (rounded down,
/// so a worker with fewer than sixteen slots keeps none back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantShare(usize);

impl TenantShare {
    pub fn of(capacity: usize) -> Self {
        Self(capacity.saturating_sub(capacity / 16).max(1))
    }
}

pub struct FairSlots {
    state: Mutex<State>,
    share: TenantShare,
    weights: Arc<TenantWeights>,
}

#[derive(Default)]
struct State {
    free: usize,
    held: HashMap<TenantId, usize>,
    /// Per tenant, its waiters in arrival order.
    waiting: HashMap<TenantId, VecDeque<oneshot::Sender<SlotPermit>>>,
}

impl State {
    /// One of `tenant`'s slots is free again.
    fn give_back(&mut self, tenant: TenantId) {
        if let Some(held) = self.held.get_mut(&tenant) {
            *held -= 1;
            if *held == 0 {
                self.held.remove(&tenant);
            }
        }
        self.free += 1;
    }
}

/// One slot, held for `tenant` until dropped.
pub struct SlotPermit {
    slots: Arc<FairSlots>,
    tenant: TenantId,
    /// False once its slot was taken back without running `Drop`'s release.
    live: bool,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        if self.live {
            self.slots.release(self.tenant);
        }
    }
}

impl FairSlots {
    pub fn new(capacity: usize, weights: Arc<TenantWeights>) -> Arc<Self> {
        let state = State { free: capacity, ..State::default() };
        Arc::new(Self { state: Mutex::new(state), share: TenantShare::of(capacity), weights })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A slot for one of `tenant`'s deliveries: at once if one is free and
    /// the tenant is under its share, else when the fair order gives it one.
    pub async fn acquire(self: &Arc<Self>, tenant: TenantId) -> SlotPermit {
        loop {
            let receiver = {
                let mut state = self.lock();
                let held = state.held.get(&tenant).copied().unwrap_or(0);
                if state.free > 0 && held < self.share.0 {
                    state.free -= 1;
                    *state.held.entry(tenant).or_insert(0) += 1;
                    return SlotPermit { slots: Arc::clone(self), tenant, live: true };
                }
                let (sender, receiver) = oneshot::channel();
                state.waiting.entry(tenant).or_default().push_back(sender);
                receiver
            };
            // A sender is only dropped unsent with the whole state; then ask again.
            if let Ok(permit) = receiver.await {
                return permit;
            }
        }
    }

    /// Slots held now, by `tenant`.
    #[cfg(test)]
    fn held_by(&self, tenant: TenantId) -> usize {
        self.lock().held.get(&tenant).copied().unwrap_or(0)
    }

    fn release(self: &Arc<Self>, tenant: TenantId) {
        let mut state = self.lock();
        state.give_back(tenant);
        self.grant(&mut state);
    }

    /// Hands free slots to waiters: each to the waiting tenant holding the
    /// fewest for its weight (under its share), oldest waiter first within a
    /// tenant.
    fn grant(self: &Arc<Self>, state: &mut State) {
        let weights = self.weights.read();
        while state.free > 0 {
            let next = state
                .waiting
                .keys()
                .map(|tenant| (*tenant, state.held.get(tenant).copied().unwrap_or(0), weights.of(*tenant)))
                .filter(|(_, held, _)| *held < self.share.0)
                // held_a / weight_a < held_b / weight_b, without dividing.
                .min_by(|(_, held_a, weight_a), (_, held_b, weight_b)| {
                    (*held_a as u64 * u64::from(*weight_b)).cmp(&(*held_b as u64 * u64::from(*weight_a)))
                });
            let Some((tenant, _, _)) = next else { return };
            let Some(queue) = state.waiting.get_mut(&tenant) else { return };
            let Some(sender) = queue.pop_front() else {
                state.waiting.remove(&tenant);
                continue;
            };
            if queue.is_empty() {
                state.waiting.remove(&tenant);
            }
            state.free -= 1;
            *state.held.entry(tenant).or_insert(0) += 1;
            let permit = SlotPermit { slots: Arc::clone(self), tenant, live: true };
            if let Err(mut unsent) = sender.send(permit) {
                // Its waiter went away: take the slot back here, under the lock.
                unsent.live = false;
                state.give_back(tenant);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_tenant_keeps_a_reserve_free_for_the_others() {
        assert_eq!(TenantShare::of(256), TenantShare(240));
        assert_eq!(TenantShare::of(16), TenantShare(15));
        assert_eq!(TenantShare::of(15), TenantShare(15));
        assert_eq!(TenantShare::of(1), TenantShare(1));
    }

    #[tokio::test]
    async fn a_busy_tenant_cannot_take_the_reserve_and_a_quiet_one_goes_first() {
        let slots = FairSlots::new(16, Arc::default());
        let (busy, quiet) = (TenantId::new(), TenantId::new());
        let mut held: Vec<SlotPermit> = Vec::new();
        for _ in 0..15 {
            held.push(slots.acquire(busy).await);
        }
        // The busy tenant's sixteenth waits, though a slot is free: the reserve.
        let mut busy_waiting = Box::pin(slots.acquire(busy));
        assert!(tokio::time::timeout(Duration::from_millis(20), &mut busy_waiting).await.is_err());
        let quiet_first = slots.acquire(quiet).await;
        assert_eq!(slots.held_by(quiet), 1, "the quiet tenant got the reserve at once");
        // All sixteen taken; a second quiet delivery queues behind the busy one's waiter…
        let quiet_second = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.acquire(quiet).await }
        });
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        // …yet the next freed slot goes to the quiet tenant, which holds fewer.
        drop(held.pop());
        let quiet_second = tokio::time::timeout(Duration::from_secs(1), quiet_second).await.unwrap().unwrap();
        assert_eq!(slots.held_by(quiet), 2);
        assert_eq!(slots.held_by(busy), 14);
        drop((quiet_first, quiet_second));
        // Freed slots now reach the busy tenant's waiter.
        let busy_last = tokio::time::timeout(Duration::from_secs(1), busy_waiting).await.unwrap();
        assert_eq!(slots.held_by(busy), 15);
        drop(busy_last);
        drop(held);
        assert_eq!(slots.held_by(busy), 0);
        assert_eq!(slots.lock().free, 16, "every slot back");
    }

    #[tokio::test]
    async fn waiting_tenants_get_freed_slots_in_proportion_to_their_weights() {
        let weights = Arc::new(TenantWeights::default());
        let (heavy, light, first) = (TenantId::new(), TenantId::new(), TenantId::new());
        weights.replace([(heavy, 2)].into_iter().collect());
        let slots = FairSlots::new(12, weights);
        // A third tenant holds every slot; the two others queue many deliveries.
        let mut held: Vec<SlotPermit> = Vec::new();
        for _ in 0..12 {
            held.push(slots.acquire(first).await);
        }
        let mut waiters = Vec::new();
        for tenant in [heavy, light] {
            for _ in 0..20 {
                let slots = Arc::clone(&slots);
                waiters.push(tokio::spawn(async move { slots.acquire(tenant).await }));
            }
        }
        while slots.lock().waiting.values().map(VecDeque::len).sum::<usize>() < 40 {
            tokio::task::yield_now().await;
        }
        // As the first tenant's slots free, weight 2 gets two for each of weight 1's.
        drop(held);
        assert_eq!((slots.held_by(heavy), slots.held_by(light)), (8, 4));
        for waiter in waiters {
            waiter.abort();
        }
    }

    #[tokio::test]
    async fn a_waiter_that_went_away_does_not_lose_its_slot() {
        let slots = FairSlots::new(1, Arc::default());
        let tenant = TenantId::new();
        let first = slots.acquire(tenant).await;
        let abandoned = tokio::time::timeout(Duration::from_millis(10), slots.acquire(tenant)).await;
        assert!(abandoned.is_err(), "none free: waits");
        drop(first);
        assert_eq!(slots.lock().free, 1);
        let again = tokio::time::timeout(Duration::from_secs(1), slots.acquire(tenant)).await;
        assert!(again.is_ok());
    }
}
