-- Endpoint circuits (issue 38, SPEC §12): an endpoint whose attempts keep
-- failing (5xx, timeouts, refused connections) has its circuit opened, and
-- its deliveries wait in Postgres as `parked` instead of going round the
-- broker's retry queues; after a cooldown one parked delivery is sent as a
-- probe; its success closes the circuit and the parked deliveries are
-- released a batch at a time, its failure opens the circuit again for twice
-- as long (worker: `circuit`, `circuit_keeper`; repo: `circuits`).
--
-- The state lives on the endpoint row, which every claim already reads: a
-- claim parks a delivery instead of leasing it while the circuit is open,
-- in the same statement. NULL columns (added without a rewrite) are a
-- closed circuit with nothing parked.
ALTER TABLE relayops.webhook_endpoints
    -- Open (deliveries park) until then; half-open (only the probe is sent) after.
    ADD COLUMN circuit_open_until  timestamptz,
    -- The cooldown that opened it: the next one after a failed probe is twice as long.
    ADD COLUMN circuit_cooldown_ms integer CHECK (circuit_cooldown_ms > 0),
    -- The parked delivery released as the probe, and when.
    ADD COLUMN circuit_probe       uuid,
    ADD COLUMN circuit_probe_at    timestamptz,
    -- When it last closed; parked deliveries may exist until some time after.
    ADD COLUMN circuit_closed_at   timestamptz,
    -- Set when it opens; cleared once it has been closed a while and nothing is parked.
    ADD COLUMN circuit_parked      boolean NOT NULL DEFAULT false;

-- The keeper's scan: the few endpoints that are open or still releasing.
CREATE INDEX webhook_endpoints_circuit_idx ON relayops.webhook_endpoints (id) WHERE circuit_parked;

-- A new delivery status, `parked`. The status CHECK is dropped everywhere it
-- exists (the partitioned parent, and a legacy partition that kept its own
-- copy: see 0008) and added again on the parent (one scan of the
-- deliveries, as the index below).
DO $$
DECLARE
    found record;
BEGIN
    FOR found IN
        SELECT c.conrelid::regclass AS rel, c.conname
        FROM pg_constraint c
        WHERE c.contype = 'c'
          AND c.conrelid IN (SELECT relid FROM pg_partition_tree('relayops.deliveries'))
          AND pg_get_constraintdef(c.oid) LIKE '%''dead''%'
        ORDER BY c.conrelid = 'relayops.deliveries'::regclass DESC
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I', found.rel, found.conname);
    END LOOP;
END $$;
ALTER TABLE relayops.deliveries ADD CONSTRAINT deliveries_status_check
    CHECK (status IN ('pending', 'in_progress', 'scheduled', 'parked', 'delivered', 'failed', 'dead'));

-- An endpoint's parked deliveries, oldest first (the probe, the release).
CREATE INDEX deliveries_partitioned_parked_idx ON relayops.deliveries (endpoint_id, updated_at) WHERE status = 'parked';
