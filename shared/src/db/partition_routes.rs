//! Sends the worker's hot statements to the one history partition a batch
//! touches instead of the partitioned parent.
//!
//! On a parent table, Postgres 15 starts a statement's generic plan for every
//! partition: it locks each one, sets up an index scan per partition for a
//! lookup whose key comes from a join (run-time pruning skips them only
//! later), and a result relation per partition for an `UPDATE`. With the
//! default 30 days of history (~34 daily partitions per table) that set-up
//! cost a claim more than its own work (commit `dd09cbe`). A
//! delivery id carries its event's millisecond (UUIDv7,
//! `relayops.delivery_id_for`), and a delivery lives in the partition of its
//! event's id, so the partition is known before the statement runs: the
//! statement names it (and the events partition of the same window), and
//! only those are locked and set up.
//!
//! The map of partitions is read from the catalog and kept for
//! [`RELOAD_AFTER`]. A delivery it has no window for (a partition created
//! since, or an id from before partitioning) reloads it, at most once per
//! [`MISS_RELOAD_GAP`]; if still unplaced, its statement runs on the parent
//! table as before. So does a statement whose partition was dropped meanwhile
//! ([`DbError::is_undefined_table`], then the map is reloaded). Naming a
//! partition never changes what a statement finds: every statement keeps its
//! own partition filters, and a partition holds every row of its window.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::db::partitions::{self, delivery_event_millis, DELIVERIES, EVENTS};
use crate::db::DbError;

/// How long a map read from the catalog is used before it is read again
/// (partitions are created days ahead and dropped after retention).
pub const RELOAD_AFTER: Duration = Duration::from_secs(60);

/// The shortest time between two reloads caused by a delivery the map has no
/// window for: ids from before partitioning never get one.
pub const MISS_RELOAD_GAP: Duration = Duration::from_secs(1);

/// How many statements a connection may hold prepared before routed ones
/// clear its cache: each partition a connection touched adds its own
/// statements, and with short partition windows (tests) they would pile up.
const PREPARED_STATEMENTS_BOUND: usize = 256;

/// The partitions one batch's statement names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    deliveries: Arc<str>,
    events: Arc<str>,
}

/// A batch's items that go to one place: `route` `None` is the parent table.
#[derive(Debug, PartialEq, Eq)]
pub struct Part {
    pub route: Option<Route>,
    /// Positions in the batch, in order.
    pub items: Vec<usize>,
}

#[derive(Debug, Clone)]
struct Window {
    from_ms: Option<i64>,
    to_ms: i64,
    name: Arc<str>,
}

#[derive(Default)]
struct Map {
    deliveries: Vec<Window>,
    events: Vec<Window>,
    loaded_at: Option<Instant>,
}

impl Map {
    /// The batch's parts, and whether an id that names a time fell in no
    /// window the map knows (a partition made since it was read).
    fn split(&self, ids: &[Uuid]) -> (Vec<Part>, bool) {
        let mut parts: Vec<Part> = Vec::with_capacity(1);
        let mut missed = false;
        for (position, id) in ids.iter().enumerate() {
            let millis = delivery_event_millis(*id);
            let route = millis.and_then(|millis| self.route(millis));
            missed |= millis.is_some() && route.is_none();
            match parts.iter_mut().find(|part| part.route == route) {
                Some(part) => part.items.push(position),
                None => parts.push(Part { route, items: vec![position] }),
            }
        }
        (parts, missed)
    }

    fn route(&self, millis: i64) -> Option<Route> {
        let covering = |windows: &[Window]| {
            windows
                .iter()
                .find(|w| w.from_ms.is_some_and(|from| from <= millis) && millis < w.to_ms)
                .map(|w| Arc::clone(&w.name))
        };
        Some(Route { deliveries: covering(&self.deliveries)?, events: covering(&self.events)? })
    }
}

/// The partition map of one database, shared by a process's batchers.
#[derive(Default)]
pub struct PartitionRoutes {
    map: tokio::sync::Mutex<Map>,
    /// Routed statement texts, by template and route.
    statements: Mutex<HashMap<(usize, Route), Arc<str>>>,
}

impl PartitionRoutes {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Splits a batch of delivery ids by the partition each lives in: one
    /// part per partition (almost always one), and one for the parent table
    /// holding the ids no partition could be named for.
    pub async fn split(&self, client: &tokio_postgres::Client, ids: &[Uuid]) -> Result<Vec<Part>, DbError> {
        let mut map = self.map.lock().await;
        if map.loaded_at.is_none_or(|at| at.elapsed() >= RELOAD_AFTER) {
            *map = load(client).await?;
        }
        let (parts, missed) = map.split(ids);
        if missed && map.loaded_at.is_none_or(|at| at.elapsed() >= MISS_RELOAD_GAP) {
            *map = load(client).await?;
            return Ok(map.split(ids).0);
        }
        Ok(parts)
    }

    /// Forgets the map (a named partition was gone): the next batch reads it
    /// again.
    pub async fn forget(&self) {
        self.map.lock().await.loaded_at = None;
    }

    /// `template` (one of the worker's statements, on the parent tables) with
    /// its tables named for `route`: each `relayops.deliveries d` and
    /// `relayops.events e` becomes that partition.
    pub fn statement(&self, template: &'static str, route: &Route) -> Arc<str> {
        let key = (template.as_ptr() as usize, route.clone());
        let mut statements = self.statements.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if statements.len() > PREPARED_STATEMENTS_BOUND {
            statements.clear();
        }
        Arc::clone(statements.entry(key).or_insert_with(|| routed_statement(template, route).into()))
    }
}

/// Before a routed statement runs on `client`: keeps the connection's
/// prepared statements bounded (see [`PREPARED_STATEMENTS_BOUND`]).
pub fn bound_prepared_statements(client: &deadpool_postgres::Client) {
    if client.statement_cache.size() > PREPARED_STATEMENTS_BOUND {
        client.statement_cache.clear();
    }
}

fn routed_statement(template: &str, route: &Route) -> String {
    template
        .replace("relayops.deliveries d\n", &format!("relayops.{} d\n", route.deliveries))
        .replace("relayops.events e\n", &format!("relayops.{} e\n", route.events))
}

async fn load(client: &tokio_postgres::Client) -> Result<Map, DbError> {
    let windows = |partitions: Vec<partitions::Partition>| {
        partitions
            .into_iter()
            // A partition being detached is on its way out: the parent decides.
            .filter(|p| !p.detach_pending)
            .map(|p| Window { from_ms: p.from_ms, to_ms: p.to_ms, name: p.name.into() })
            .collect()
    };
    Ok(Map {
        deliveries: windows(partitions::list(client, DELIVERIES).await?),
        events: windows(partitions::list(client, EVENTS).await?),
        loaded_at: Some(Instant::now()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(from_ms: Option<i64>, to_ms: i64, name: &str) -> Window {
        Window { from_ms, to_ms, name: name.into() }
    }

    #[test]
    fn a_millisecond_goes_to_the_window_that_holds_it_and_the_legacy_one_is_never_named() {
        let map = Map {
            deliveries: vec![window(None, 1_000, "deliveries_legacy"), window(Some(1_000), 2_000, "deliveries_p1")],
            events: vec![window(None, 1_000, "events_legacy"), window(Some(1_000), 2_000, "events_p1")],
            loaded_at: None,
        };
        let named = map.route(1_000).unwrap();
        assert_eq!((&*named.deliveries, &*named.events), ("deliveries_p1", "events_p1"));
        assert_eq!(map.route(1_999).unwrap(), named);
        assert_eq!(map.route(2_000), None, "past the last window");
        assert_eq!(map.route(999), None, "the legacy partition (open below) is left to the parent");
    }

    #[test]
    fn a_routed_statement_names_the_partitions_and_not_the_parents() {
        let route = Route { deliveries: "deliveries_p1".into(), events: "events_p1".into() };
        let template =
            "SELECT 1 FROM relayops.deliveries d\n JOIN relayops.events e\n ON true;\n UPDATE relayops.deliveries d\n";
        let routed = routed_statement(template, &route);
        assert_eq!(
            routed,
            "SELECT 1 FROM relayops.deliveries_p1 d\n JOIN relayops.events_p1 e\n ON true;\n UPDATE relayops.deliveries_p1 d\n"
        );
    }
}
