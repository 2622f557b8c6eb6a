-- Ingest finds an event's subscribers by probing
-- `endpoint_subscriptions (tenant_id, event_type_pattern, endpoint_id)` once
-- per pattern that matches its type (`repo::events::subscribed_endpoints!`).
-- A probe reads only subscriptions that match, which the event needs anyway,
-- so it is the right plan whatever the data. But the planner prices it from
-- the patterns' statistics: where a tenant's subscriptions share a few
-- patterns (2,000 endpoints on `other.type` and `c.*`), a probe looked
-- unselective and each one read every subscription of the tenant, or of the
-- table, instead (12,003 rows for an event with one subscriber, three
-- patterns; test `pipeline::ingest_reads_only_the_subscriptions_that_match_…`).
-- Patterns are declared as distinct as half the rows (kept by every ANALYZE),
-- so the probe is priced as the key lookup it is.
ALTER TABLE relayops.endpoint_subscriptions ALTER COLUMN event_type_pattern SET (n_distinct = -0.5);
ANALYZE relayops.endpoint_subscriptions;
