-- Ingest finds an event's subscribers from the patterns that match its type
-- (issue 18): `relayops.patterns_matching('a.b.c')` is every stored pattern
-- that matches it — the type itself, `*`, `a.*` and `a.b.*` (the rule of
-- `EventTypePattern::matches`: a `prefix.*` pattern matches a type starting
-- with `prefix.`) — and the index below looks each up per tenant. Before, ingest
-- read every endpoint of the tenant and, for each, its subscriptions: one
-- subscriber among 101 endpoints cost 35-55 ms an event on a bench database,
-- and the work grew with the square of the tenant's endpoints.
-- PL/pgSQL: a loop over the dots costs ~4 us a call here, where the same in
-- SQL (generate_series and array_agg, never inlined) cost ~17 us.
CREATE FUNCTION relayops.patterns_matching(event_type text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    patterns text[] := ARRAY[event_type, '*'];
    at int := 0;
    step int;
BEGIN
    LOOP
        step := strpos(substr(event_type, at + 1), '.');
        EXIT WHEN step = 0;
        at := at + step;
        patterns := patterns || (left(event_type, at) || '*');
    END LOOP;
    RETURN patterns;
END
$$;

CREATE INDEX endpoint_subscriptions_pattern_idx
    ON relayops.endpoint_subscriptions (tenant_id, event_type_pattern, endpoint_id);
