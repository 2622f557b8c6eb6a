//! The worker's delivery slots (`RELAYOPS_WORKER_CONCURRENCY`), shared fairly
//! between tenants and, inside a tenant, between its endpoints: a freed slot
//! goes to the waiting tenant that holds the fewest for its weight
//! ([`TenantWeights`]: a weight-2 tenant holds twice a weight-1 tenant's
//! while both wait), and of that tenant's waiting deliveries to the one whose
//! endpoint holds the fewest. No tenant holds more than [`TenantShare`] of
//! the slots while others may come, and no endpoint more than that share of
//! its tenant's unless it is known to be fast — to give its slots back
//! within [`FAST_HOLD`] on average (SPEC §12). A tenant alone still gets all
//! but the reserve, so a lone busy tenant is not held back; a tenant whose
//! receiver is slow (each slot held for seconds) leaves the reserve free for
//! every other tenant's next delivery — and a slow endpoint, or one not
//! known yet, its tenant's reserve for the tenant's other endpoints, whose
//! next delivery would otherwise wait for the slow one's slots, which all
//! free together every few seconds —, and among tenants waiting, the one
//! with the least under way goes first — not whoever queued first.
//!
//! A tenant or endpoint at its share does not queue a slow endpoint's
//! deliveries here — one whose slots are held for [`SLOW_HOLD`] or more on
//! average lately: [`FairSlots::acquire_or_park`] answers [`Grant::Park`],
//! at once or as soon as the endpoint turns out slow, and the delivery is parked
//! (`crate::settle`), to be admitted in its endpoint's turn
//! (`crate::admission`, which waits here with [`FairSlots::acquire`]). A
//! tenant's slow endpoint with a generous `max_in_flight` thus never fills
//! the tenant's shards and the worker's windows in front of its other
//! endpoints' deliveries, and those, once here, go before the slow
//! endpoint's admissions. A fast endpoint's deliveries wait here as before:
//! its slots free within milliseconds, and parking would only add writes.
//!
//! A slot is held from before the claim until the delivery is settled; a
//! [`SlotPermit`] gives it back when dropped (also when a task is aborted).
//! Each grant looks at the tenants and endpoints waiting in this worker —
//! as many as the deliveries in its prefetch windows at most, whatever the
//! number of tenants.
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use relayops_shared::ids::{EndpointId, TenantId};
use tokio::sync::oneshot;

use crate::weights::TenantWeights;

/// An endpoint whose slots are held this long on average (its receiver
/// answers in about that, or slower) is slow: beyond its tenant's share,
/// its deliveries wait parked, not in the worker's windows.
pub const SLOW_HOLD: Duration = Duration::from_millis(500);

/// An endpoint whose slots are held less than this on average lately is
/// fast: it may hold its tenant's whole share. Half of [`SLOW_HOLD`], so a
/// slow endpoint's few short holds (a delivery parked after all, a lease
/// that found nothing) do not make it fast.
pub const FAST_HOLD: Duration = Duration::from_millis(250);

/// How much of an endpoint's average hold each released slot makes up.
const HOLD_WEIGHT: f64 = 0.2;

/// The most of `capacity` slots one holder may hold: all but a sixteenth
/// (rounded down, so fewer than sixteen keep none back). A tenant's share of
/// the worker's slots, and an endpoint's of its tenant's.
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
    /// The most slots one endpoint may hold, unless known to be fast: the
    /// same share of its tenant's.
    endpoint_share: TenantShare,
    weights: Arc<TenantWeights>,
}

/// What a waiter is given.
pub enum Grant {
    Slot(SlotPermit),
    /// Park the delivery instead: its tenant or endpoint holds its share
    /// and the endpoint is slow.
    Park,
}

struct Waiter {
    sender: oneshot::Sender<Grant>,
    /// Whether it may be told to park ([`FairSlots::acquire_or_park`]).
    parkable: bool,
}

/// The waiters for one endpoint's slots, in arrival order.
type Waiters = VecDeque<Waiter>;

#[derive(Default)]
struct State {
    free: usize,
    held: HashMap<TenantId, usize>,
    held_by_endpoint: HashMap<EndpointId, usize>,
    /// Per endpoint holding slots, how long it held them lately, seconds
    /// (a moving average of the slots it gave back).
    hold_secs: HashMap<EndpointId, f64>,
    /// Per tenant, per endpoint, its waiters (never an empty queue).
    waiting: HashMap<TenantId, HashMap<EndpointId, Waiters>>,
}

impl State {
    fn held(&self, tenant: TenantId) -> usize {
        self.held.get(&tenant).copied().unwrap_or(0)
    }

    fn held_by(&self, endpoint: EndpointId) -> usize {
        self.held_by_endpoint.get(&endpoint).copied().unwrap_or(0)
    }

    fn take(&mut self, holder: Holder) {
        self.free -= 1;
        *self.held.entry(holder.tenant).or_insert(0) += 1;
        *self.held_by_endpoint.entry(holder.endpoint).or_insert(0) += 1;
    }

    /// One of `holder`'s slots is free again.
    fn give_back(&mut self, holder: Holder) {
        decrement(&mut self.held, holder.tenant);
        if !decrement(&mut self.held_by_endpoint, holder.endpoint) {
            self.hold_secs.remove(&holder.endpoint);
        }
        self.free += 1;
    }

    /// `endpoint` held a slot for `held`.
    fn record_hold(&mut self, endpoint: EndpointId, held: Duration) {
        let held = held.as_secs_f64();
        let average = self.hold_secs.entry(endpoint).or_insert(held);
        *average += (held - *average) * HOLD_WEIGHT;
    }

    /// The oldest waiter of `holder`'s endpoint, taken out of the queues.
    fn next_waiter(&mut self, holder: Holder) -> Option<Waiter> {
        let endpoints = self.waiting.get_mut(&holder.tenant)?;
        let queue = endpoints.get_mut(&holder.endpoint)?;
        let waiter = queue.pop_front();
        self.forget_if_empty(holder);
        waiter
    }

    /// Drops `holder`'s endpoint's queue once empty, and its tenant's map.
    fn forget_if_empty(&mut self, holder: Holder) {
        let Some(endpoints) = self.waiting.get_mut(&holder.tenant) else { return };
        if endpoints.get(&holder.endpoint).is_some_and(VecDeque::is_empty) {
            endpoints.remove(&holder.endpoint);
        }
        if endpoints.is_empty() {
            self.waiting.remove(&holder.tenant);
        }
    }

    /// Tells `holder`'s endpoint's parkable waiters to park.
    fn park_waiters(&mut self, holder: Holder) {
        let Some(endpoints) = self.waiting.get_mut(&holder.tenant) else { return };
        let Some(queue) = endpoints.get_mut(&holder.endpoint) else { return };
        for waiter in std::mem::take(queue) {
            if waiter.parkable {
                let _ = waiter.sender.send(Grant::Park);
            } else {
                queue.push_back(waiter);
            }
        }
        self.forget_if_empty(holder);
    }

    fn is_slow(&self, endpoint: EndpointId) -> bool {
        self.hold_secs.get(&endpoint).is_some_and(|secs| *secs >= SLOW_HOLD.as_secs_f64())
    }

    /// Known to give its slots back within [`FAST_HOLD`] on average lately.
    fn is_fast(&self, endpoint: EndpointId) -> bool {
        self.hold_secs.get(&endpoint).is_some_and(|secs| *secs < FAST_HOLD.as_secs_f64())
    }
}

/// Counts one fewer for `key`; whether any are left.
fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: K) -> bool {
    let Some(count) = counts.get_mut(&key) else { return false };
    *count -= 1;
    if *count == 0 {
        counts.remove(&key);
        return false;
    }
    true
}

/// Whose slot it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Holder {
    tenant: TenantId,
    endpoint: EndpointId,
}

/// One slot, held for a tenant's endpoint until dropped.
pub struct SlotPermit {
    slots: Arc<FairSlots>,
    holder: Holder,
    since: Instant,
    /// False once its slot was taken back without running `Drop`'s release.
    live: bool,
}

impl SlotPermit {
    fn new(slots: &Arc<FairSlots>, holder: Holder) -> Self {
        Self { slots: Arc::clone(slots), holder, since: Instant::now(), live: true }
    }
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        if self.live {
            self.slots.release(self.holder, self.since.elapsed());
        }
    }
}

impl FairSlots {
    pub fn new(capacity: usize, weights: Arc<TenantWeights>) -> Arc<Self> {
        let state = State { free: capacity, ..State::default() };
        let share = TenantShare::of(capacity);
        Arc::new(Self { state: Mutex::new(state), share, endpoint_share: TenantShare::of(share.0), weights })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A slot for one of `tenant`'s deliveries to `endpoint`: at once if one
    /// is free and the tenant is under its share, else when the fair order
    /// gives it one.
    pub async fn acquire(self: &Arc<Self>, tenant: TenantId, endpoint: EndpointId) -> SlotPermit {
        loop {
            if let Grant::Slot(permit) = self.ask(Holder { tenant, endpoint }, false).await {
                return permit;
            }
        }
    }

    /// [`acquire`](Self::acquire), or [`Grant::Park`] once `tenant` or
    /// `endpoint` holds its share and `endpoint` is slow (see the module's
    /// doc).
    pub async fn acquire_or_park(self: &Arc<Self>, tenant: TenantId, endpoint: EndpointId) -> Grant {
        self.ask(Holder { tenant, endpoint }, true).await
    }

    async fn ask(self: &Arc<Self>, holder: Holder, parkable: bool) -> Grant {
        loop {
            let receiver = {
                let mut state = self.lock();
                let at_share = self.at_share(&state, holder);
                if !at_share && state.free > 0 {
                    state.take(holder);
                    return Grant::Slot(SlotPermit::new(self, holder));
                }
                if at_share && parkable && state.is_slow(holder.endpoint) {
                    return Grant::Park;
                }
                let (sender, receiver) = oneshot::channel();
                let waiter = Waiter { sender, parkable };
                state.waiting.entry(holder.tenant).or_default().entry(holder.endpoint).or_default().push_back(waiter);
                receiver
            };
            // A sender is only dropped unsent with the whole state; then ask again.
            if let Ok(grant) = receiver.await {
                return grant;
            }
        }
    }

    /// Slots held now, by `tenant`.
    #[cfg(test)]
    fn held_by(&self, tenant: TenantId) -> usize {
        self.lock().held(tenant)
    }

    /// Slots held now, for `endpoint`.
    #[cfg(test)]
    fn held_for(&self, endpoint: EndpointId) -> usize {
        self.lock().held_by(endpoint)
    }

    /// Whether `endpoint`'s slots are held for [`SLOW_HOLD`] or more on
    /// average lately (`false` while it holds none, or has given none back).
    #[cfg(test)]
    fn is_slow(&self, endpoint: EndpointId) -> bool {
        self.lock().is_slow(endpoint)
    }

    /// Whether `holder`'s tenant holds its share, or its endpoint — unless
    /// known to be fast — its share of the tenant's.
    fn at_share(&self, state: &State, holder: Holder) -> bool {
        state.held(holder.tenant) >= self.share.0 || self.endpoint_at_share(state, holder.endpoint)
    }

    fn endpoint_at_share(&self, state: &State, endpoint: EndpointId) -> bool {
        state.held_by(endpoint) >= self.endpoint_share.0 && !state.is_fast(endpoint)
    }

    /// A slot given back after `held`: if its tenant or endpoint held its
    /// share and the endpoint is slow, that endpoint's parkable waiters are
    /// told to park; then the free slots are granted.
    fn release(self: &Arc<Self>, holder: Holder, held: Duration) {
        let mut state = self.lock();
        state.record_hold(holder.endpoint, held);
        if self.at_share(&state, holder) && state.is_slow(holder.endpoint) {
            state.park_waiters(holder);
        }
        state.give_back(holder);
        self.grant(&mut state);
    }

    /// Who gets the next free slot: of the tenants under their share, the one
    /// holding the fewest for its weight; of its endpoints under theirs, the
    /// one holding the fewest.
    fn next_holder(&self, state: &State) -> Option<Holder> {
        let weights = self.weights.read();
        let mut best: Option<(Holder, u64, u64)> = None;
        for (tenant, endpoints) in &state.waiting {
            let held = state.held(*tenant) as u64;
            if held >= self.share.0 as u64 {
                continue;
            }
            let weight = u64::from(weights.of(*tenant));
            // held / weight < best_held / best_weight, without dividing.
            if best.is_some_and(|(_, best_held, best_weight)| held * best_weight >= best_held * weight) {
                continue;
            }
            let endpoint = endpoints
                .keys()
                .filter(|endpoint| !self.endpoint_at_share(state, **endpoint))
                .min_by_key(|endpoint| state.held_by(**endpoint));
            if let Some(endpoint) = endpoint {
                best = Some((Holder { tenant: *tenant, endpoint: *endpoint }, held, weight));
            }
        }
        best.map(|(holder, _, _)| holder)
    }

    /// Hands free slots to waiters, as [`next_holder`](Self::next_holder)
    /// says, oldest waiter first within an endpoint.
    fn grant(self: &Arc<Self>, state: &mut State) {
        while state.free > 0 {
            let Some(holder) = self.next_holder(state) else { return };
            let Some(waiter) = state.next_waiter(holder) else { return };
            state.take(holder);
            let permit = SlotPermit::new(self, holder);
            if let Err(Grant::Slot(mut unsent)) = waiter.sender.send(Grant::Slot(permit)) {
                // Its waiter went away: take the slot back here, under the lock.
                unsent.live = false;
                state.give_back(holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A tenant with one endpoint.
    fn holder() -> (TenantId, EndpointId) {
        (TenantId::new(), EndpointId::new())
    }

    fn waiting(slots: &FairSlots) -> usize {
        slots.lock().waiting.values().flat_map(HashMap::values).map(VecDeque::len).sum()
    }

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
        let (busy, quiet) = (holder(), holder());
        let mut held: Vec<SlotPermit> = Vec::new();
        for _ in 0..15 {
            held.push(slots.acquire(busy.0, busy.1).await);
        }
        // The busy tenant's sixteenth waits, though a slot is free: the reserve.
        let mut busy_waiting = Box::pin(slots.acquire(busy.0, busy.1));
        assert!(tokio::time::timeout(Duration::from_millis(20), &mut busy_waiting).await.is_err());
        let quiet_first = slots.acquire(quiet.0, quiet.1).await;
        assert_eq!(slots.held_by(quiet.0), 1, "the quiet tenant got the reserve at once");
        // All sixteen taken; a second quiet delivery queues behind the busy one's waiter…
        let quiet_second = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.acquire(quiet.0, quiet.1).await }
        });
        while waiting(&slots) < 2 {
            tokio::task::yield_now().await;
        }
        // …yet the next freed slot goes to the quiet tenant, which holds fewer.
        drop(held.pop());
        let quiet_second = tokio::time::timeout(Duration::from_secs(1), quiet_second).await.unwrap().unwrap();
        assert_eq!(slots.held_by(quiet.0), 2);
        assert_eq!(slots.held_by(busy.0), 14);
        drop((quiet_first, quiet_second));
        // Freed slots now reach the busy tenant's waiter.
        let busy_last = tokio::time::timeout(Duration::from_secs(1), busy_waiting).await.unwrap();
        assert_eq!(slots.held_by(busy.0), 15);
        drop(busy_last);
        drop(held);
        assert_eq!(slots.held_by(busy.0), 0);
        assert_eq!(slots.lock().free, 16, "every slot back");
    }

    fn slot(grant: Grant) -> SlotPermit {
        match grant {
            Grant::Slot(permit) => permit,
            Grant::Park => panic!("told to park"),
        }
    }

    #[tokio::test]
    async fn a_tenant_at_its_share_gives_its_next_slot_to_its_endpoint_holding_the_fewest() {
        let slots = FairSlots::new(16, Arc::default());
        let (tenant, busy) = holder();
        let sibling = EndpointId::new();
        let mut held: Vec<SlotPermit> = Vec::new();
        for _ in 0..15 {
            held.push(slot(slots.acquire_or_park(tenant, busy).await));
        }
        // Waiting for the busy endpoint, then for the sibling (neither slow):
        let busy_waiting = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slot(slots.acquire_or_park(tenant, busy).await) }
        });
        while waiting(&slots) < 1 {
            tokio::task::yield_now().await;
        }
        let sibling_waiting = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slot(slots.acquire_or_park(tenant, sibling).await) }
        });
        while waiting(&slots) < 2 {
            tokio::task::yield_now().await;
        }
        // …a slot the busy endpoint frees goes to the sibling, which holds none.
        drop(held.pop());
        let sibling_slot = tokio::time::timeout(Duration::from_secs(1), sibling_waiting).await.unwrap().unwrap();
        assert_eq!((slots.held_for(busy), slots.held_for(sibling)), (14, 1));
        // The next to the busy endpoint's waiter: 15 in all, the tenant's share.
        drop(held.pop());
        let busy_slot = tokio::time::timeout(Duration::from_secs(1), busy_waiting).await.unwrap().unwrap();
        assert_eq!((slots.held_for(busy), slots.held_by(tenant)), (14, 15));
        drop((busy_slot, sibling_slot, held));
        assert_eq!(slots.lock().free, 16, "every slot back");
        assert!(slots.lock().held_by_endpoint.is_empty() && slots.lock().held.is_empty());
    }

    #[tokio::test]
    async fn an_endpoint_leaves_its_tenants_reserve_to_the_tenants_other_endpoints() {
        // 64 slots: a tenant holds at most 60, an endpoint at most 57 of them.
        let slots = FairSlots::new(64, Arc::default());
        let (tenant, busy) = holder();
        let sibling = EndpointId::new();
        assert_eq!(TenantShare::of(60), TenantShare(57));
        let mut held: Vec<SlotPermit> = Vec::new();
        for _ in 0..57 {
            held.push(slot(slots.acquire_or_park(tenant, busy).await));
        }
        let mut busy_waiting = Box::pin(slots.acquire_or_park(tenant, busy));
        assert!(
            tokio::time::timeout(Duration::from_millis(20), &mut busy_waiting).await.is_err(),
            "the busy endpoint (not slow) waits at its share, though slots are free"
        );
        let sibling_slots: Vec<SlotPermit> = vec![
            slot(slots.acquire_or_park(tenant, sibling).await),
            slot(slots.acquire_or_park(tenant, sibling).await),
            slot(slots.acquire_or_park(tenant, sibling).await),
        ];
        assert_eq!((slots.held_for(busy), slots.held_for(sibling), slots.held_by(tenant)), (57, 3, 60));
        // A slot of the busy endpoint freed goes back to its waiter.
        drop(held.pop());
        let busy_next = slot(tokio::time::timeout(Duration::from_secs(1), busy_waiting).await.unwrap());
        assert_eq!(slots.held_for(busy), 57);
        // Slow, at its share, its next delivery is told to park.
        for _ in 0..10 {
            slots.lock().record_hold(busy, Duration::from_secs(2));
        }
        drop(sibling_slots);
        assert!(matches!(slots.acquire_or_park(tenant, busy).await, Grant::Park));
        drop((busy_next, held));
        assert_eq!(slots.lock().free, 64, "every slot back");
    }

    #[tokio::test]
    async fn an_endpoint_known_to_be_fast_may_take_its_tenants_whole_share() {
        let slots = FairSlots::new(64, Arc::default());
        let (tenant, fast) = holder();
        slots.lock().record_hold(fast, Duration::from_millis(10));
        let mut held: Vec<SlotPermit> = Vec::new();
        for _ in 0..60 {
            held.push(slot(slots.acquire_or_park(tenant, fast).await));
        }
        assert_eq!(slots.held_for(fast), 60, "the tenant's share, not 57: its slots free within milliseconds");
        let mut waiting_one = Box::pin(slots.acquire_or_park(tenant, fast));
        assert!(tokio::time::timeout(Duration::from_millis(20), &mut waiting_one).await.is_err(), "the tenant's share");
        drop(held.pop());
        let next = slot(tokio::time::timeout(Duration::from_secs(1), waiting_one).await.unwrap());
        assert_eq!(slots.held_for(fast), 60);
        drop((next, held));
    }

    #[tokio::test]
    async fn a_slow_endpoints_deliveries_beyond_its_tenants_share_are_told_to_park_but_admissions_wait() {
        let slots = FairSlots::new(16, Arc::default());
        let (tenant, slow) = holder();
        let mut held: Vec<SlotPermit> = Vec::new();
        for _ in 0..15 {
            held.push(slots.acquire(tenant, slow).await);
        }
        // Not known to be slow yet: a delivery and an admission both wait.
        let delivery = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.acquire_or_park(tenant, slow).await }
        });
        let admission = tokio::spawn({
            let slots = Arc::clone(&slots);
            async move { slots.acquire(tenant, slow).await }
        });
        while waiting(&slots) < 2 {
            tokio::task::yield_now().await;
        }
        // Its slots turn out to be held for most of a second: the waiting
        // delivery is told to park, and the freed slot goes to the admission.
        slots.lock().record_hold(slow, Duration::from_millis(900));
        drop(held.pop());
        let told = tokio::time::timeout(Duration::from_secs(1), delivery).await.unwrap().unwrap();
        assert!(matches!(told, Grant::Park), "the waiting delivery parks");
        let admitted = tokio::time::timeout(Duration::from_secs(1), admission).await.unwrap().unwrap();
        assert_eq!(slots.held_for(slow), 15);
        // From now on, told at once while the tenant holds its share…
        assert!(matches!(slots.acquire_or_park(tenant, slow).await, Grant::Park));
        // …and given a slot as before once it holds fewer.
        drop(admitted);
        let again = tokio::time::timeout(Duration::from_secs(1), slots.acquire_or_park(tenant, slow)).await.unwrap();
        assert!(matches!(again, Grant::Slot(_)));
    }

    #[tokio::test]
    async fn an_endpoint_whose_slots_are_held_half_a_second_or_more_is_slow_while_it_holds_any() {
        let slots = FairSlots::new(4, Arc::default());
        let (tenant, endpoint) = holder();
        let first = slots.acquire(tenant, endpoint).await;
        let second = slots.acquire(tenant, endpoint).await;
        assert!(!slots.is_slow(endpoint), "none given back yet");
        slots.lock().record_hold(endpoint, Duration::from_millis(900));
        assert!(slots.is_slow(endpoint));
        for _ in 0..10 {
            slots.lock().record_hold(endpoint, Duration::from_millis(20));
        }
        assert!(!slots.is_slow(endpoint), "fast again: the average follows");
        slots.lock().record_hold(endpoint, Duration::from_secs(5));
        drop(first);
        assert!(slots.is_slow(endpoint), "one slot given back at once does not make it fast");
        drop(second);
        assert!(!slots.is_slow(endpoint), "holding none: forgotten");
        assert!(slots.lock().hold_secs.is_empty());
    }

    #[tokio::test]
    async fn waiting_tenants_get_freed_slots_in_proportion_to_their_weights() {
        let weights = Arc::new(TenantWeights::default());
        let (heavy, light, first) = (holder(), holder(), holder());
        weights.replace([(heavy.0, 2)].into_iter().collect());
        let slots = FairSlots::new(12, weights);
        // A third tenant holds every slot; the two others queue many deliveries.
        let mut held: Vec<SlotPermit> = Vec::new();
        for _ in 0..12 {
            held.push(slots.acquire(first.0, first.1).await);
        }
        let mut waiters = Vec::new();
        for (tenant, endpoint) in [heavy, light] {
            for _ in 0..20 {
                let slots = Arc::clone(&slots);
                waiters.push(tokio::spawn(async move { slots.acquire(tenant, endpoint).await }));
            }
        }
        while waiting(&slots) < 40 {
            tokio::task::yield_now().await;
        }
        // As the first tenant's slots free, weight 2 gets two for each of weight 1's.
        drop(held);
        assert_eq!((slots.held_by(heavy.0), slots.held_by(light.0)), (8, 4));
        for waiter in waiters {
            waiter.abort();
        }
    }

    #[tokio::test]
    async fn a_waiter_that_went_away_does_not_lose_its_slot() {
        let slots = FairSlots::new(1, Arc::default());
        let (tenant, endpoint) = holder();
        let first = slots.acquire(tenant, endpoint).await;
        let abandoned = tokio::time::timeout(Duration::from_millis(10), slots.acquire(tenant, endpoint)).await;
        assert!(abandoned.is_err(), "none free: waits");
        drop(first);
        assert_eq!(slots.lock().free, 1);
        let again = tokio::time::timeout(Duration::from_secs(1), slots.acquire(tenant, endpoint)).await;
        assert!(again.is_ok());
    }
}
