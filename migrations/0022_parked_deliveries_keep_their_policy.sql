-- Parked deliveries keep their retry policy, and circuits count failures
-- across workers (SPEC §12): a delivery parked
-- behind an open endpoint circuit still dies when its schedule's time and
-- `max_attempts` are used up, counted as if it had been tried on schedule
-- from the moment it was parked; unless its endpoint holds deliveries while
-- the circuit is open (`circuit_hold_secs`), in which case it waits at
-- least that long. A parked row's `next_attempt_at` is that moment: the
-- publisher's recovery pass makes it `dead` then, with its dead letter and
-- `delivery.dead` (repo: `parked_expiry`). Endpoints with parked deliveries
-- are found on the parked rows' own index, not through a flag whose
-- clearing rested on a timing guess; half-open circuits on their own index.

ALTER TABLE relayops.webhook_endpoints
    -- Hold parked deliveries at least this long (NULL: the retry policy decides).
    ADD COLUMN circuit_hold_secs integer CHECK (circuit_hold_secs > 0),
    -- The endpoint's run of failed attempts in a row, counted by every
    -- worker (an answer resets it; reaching the limit opens the circuit).
    ADD COLUMN circuit_failures  integer NOT NULL DEFAULT 0;

-- When a delivery parked now, with `attempts_made` attempts behind it, is
-- given up: its remaining attempts' waits summed (the wait after attempt j is
-- the schedule's j-th step, the last step repeating; no jitter), or the hold
-- if that is longer. The default schedule and `max_attempts` are the
-- platform's (`worker::policy::DEFAULT_SCHEDULE_SECS`, 8 attempts: a unit
-- test keeps them in step).
CREATE FUNCTION relayops.parked_gives_up_at(
    attempts_made integer, max_attempts integer, schedule_secs integer[], hold_secs integer)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT greatest(
        now() + make_interval(secs => (
            SELECT coalesce(sum(s.steps[least(j, cardinality(s.steps))]), 0)::double precision
            FROM (SELECT coalesce(nullif(schedule_secs, '{}'),
                                  ARRAY[5, 300, 1800, 7200, 18000, 36000, 36000]) AS steps) s,
                 generate_series(attempts_made + 1, coalesce(max_attempts, 8) - 1) AS j)),
        now() + make_interval(secs => hold_secs::double precision))
$$;

-- Parked rows already waiting get their moment now, from their endpoint's policy.
UPDATE relayops.deliveries d
SET next_attempt_at = relayops.parked_gives_up_at(d.attempt_count, ep.max_attempts, ep.retry_schedule_secs, NULL)
FROM relayops.webhook_endpoints ep
WHERE d.status = 'parked' AND ep.id = d.endpoint_id;

-- The recovery pass's sweep: parked deliveries whose time is up, soonest first.
CREATE INDEX deliveries_partitioned_parked_until_idx ON relayops.deliveries (next_attempt_at)
    WHERE status = 'parked';

-- Parked deliveries are found through their own index
-- (`deliveries_partitioned_parked_idx`): the flag goes.
DROP INDEX relayops.webhook_endpoints_circuit_idx;
ALTER TABLE relayops.webhook_endpoints DROP COLUMN circuit_parked;

-- The recovery pass's probes: circuits whose open time passed, oldest first.
CREATE INDEX webhook_endpoints_circuit_open_idx ON relayops.webhook_endpoints (circuit_open_until)
    WHERE circuit_open_until IS NOT NULL;
