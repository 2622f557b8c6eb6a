-- Ingest finds an event's subscribers from the patterns that match its type
-- (issue 18): `relayops.patterns_matching('a.b.c')` is every stored pattern
-- that matches it — the type itself, `*`, `a.*` and `a.b.*` (the rule of
-- `EventTypePattern::matches`: a `prefix.*` pattern matches a type starting
-- with `prefix.`) — and the index below looks each up per tenant. Before, ingest
-- read every endpoint of the tenant and, for each, its subscriptions: one
-- subscriber among 101 endpoints cost 35-55 ms an event on a bench database,
-- and the work grew with the square of the tenant's endpoints.
CREATE FUNCTION relayops.patterns_matching(event_type text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT ARRAY[event_type, '*'] || coalesce(array_agg(left(event_type, p) || '*' ORDER BY p), '{}')
    FROM generate_series(1, length(event_type)) AS p
    WHERE substr(event_type, p, 1) = '.'
$$;

CREATE INDEX endpoint_subscriptions_pattern_idx
    ON relayops.endpoint_subscriptions (tenant_id, event_type_pattern, endpoint_id);
