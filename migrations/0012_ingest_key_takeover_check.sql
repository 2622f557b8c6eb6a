-- Ingest takes over an idempotency key whose event is gone (dropped with its
-- partition, or by a tenant's shorter retention). Written inline, that check
-- is a subquery on the partitioned `events` parent, and every ingest then
-- opened and locked each `events` partition and its indexes when the
-- statement started, though the check runs only when a key is already taken
-- (measured: 12 % of ingest's database throughput with 5 partitions; it
-- grows with their number). A PL/pgSQL function is planned when it is first
-- called, not as part of the statement, so ingest touches `events` partitions
-- only when the check really runs, and then finds the event by id in its own.
CREATE FUNCTION relayops.event_exists(event_id uuid) RETURNS boolean
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM relayops.events e WHERE e.id = event_id);
END
$$;
