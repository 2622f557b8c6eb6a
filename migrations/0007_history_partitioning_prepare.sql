-- relayops: no transaction
-- Upgrade to time-partitioned history (issue 14), step 1 of 2: everything that
-- scans the existing tables, done without blocking ingest, so that step 2
-- (0008, the swap) only renames, attaches and reuses. Each statement commits on
-- its own; every one can be run again (a failed run resumes). A failed
-- CREATE INDEX CONCURRENTLY leaves an INVALID index behind: drop it by hand
-- before running again.

-- The upper bound of the legacy partition: an hour ahead, so rows written while
-- this step runs still fall below it. Ids are UUIDv7: their first 48 bits are
-- milliseconds since the epoch, so a time bound is a uuid bound.
CREATE TABLE IF NOT EXISTS relayops.history_upgrade (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    legacy_upto    uuid NOT NULL,
    -- When the copy of idempotency keys below began: step 2 copies the rest.
    keys_copied_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO relayops.history_upgrade (legacy_upto)
SELECT (lpad(to_hex(floor(extract(epoch FROM now() + interval '1 hour') * 1000)::bigint), 12, '0')
        || '00000000000000000000')::uuid
ON CONFLICT (singleton) DO NOTHING;

-- The unique key the partitioned deliveries need (it must hold the partition
-- key, event_id) and the attempt lookup without uniqueness (it cannot hold the
-- partition key of attempts, their own id).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS deliveries_id_event_id_key ON relayops.deliveries (id, event_id);

CREATE INDEX CONCURRENTLY IF NOT EXISTS delivery_attempts_lookup_idx
    ON relayops.delivery_attempts (tenant_id, delivery_id, attempt_number);

-- Idempotency keys move to their own table (unique keys of a partitioned
-- table must hold the partition key), honoured for a window
-- (shared::repo::retention::IDEMPOTENCY_WINDOW, 7 days) and then pruned. The
-- keys of the window so far are copied here; step 2 copies those that came
-- after, found through this index (dropped there).
CREATE INDEX CONCURRENTLY IF NOT EXISTS events_keyed_received_idx
    ON relayops.events (received_at) WHERE idempotency_key IS NOT NULL;

CREATE TABLE IF NOT EXISTS relayops.idempotency_keys (
    tenant_id       uuid NOT NULL REFERENCES relayops.tenants (id) ON DELETE CASCADE,
    idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    event_id        uuid NOT NULL,
    request_hash    bytea NOT NULL CHECK (length(request_hash) = 32),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, idempotency_key)
);

CREATE INDEX IF NOT EXISTS idempotency_keys_created_idx ON relayops.idempotency_keys (created_at);

INSERT INTO relayops.idempotency_keys (tenant_id, idempotency_key, event_id, request_hash, created_at)
SELECT tenant_id, idempotency_key, id, request_hash, received_at
FROM relayops.events
WHERE idempotency_key IS NOT NULL AND received_at > now() - interval '7 days'
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING;

-- CHECK constraints that prove every row is below the legacy bound, so
-- ATTACH PARTITION in step 2 need not scan. NOT VALID is instant; VALIDATE
-- scans under SHARE UPDATE EXCLUSIVE, which does not block reads or writes.
DO $$
DECLARE
    upto uuid := (SELECT legacy_upto FROM relayops.history_upgrade);
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'events_legacy_upto') THEN
        EXECUTE format('ALTER TABLE relayops.events ADD CONSTRAINT events_legacy_upto CHECK (id < %L) NOT VALID', upto);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'deliveries_legacy_upto') THEN
        EXECUTE format('ALTER TABLE relayops.deliveries ADD CONSTRAINT deliveries_legacy_upto CHECK (event_id < %L) NOT VALID', upto);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'delivery_attempts_legacy_upto') THEN
        EXECUTE format('ALTER TABLE relayops.delivery_attempts ADD CONSTRAINT delivery_attempts_legacy_upto CHECK (id < %L) NOT VALID', upto);
    END IF;
END $$;

ALTER TABLE relayops.events VALIDATE CONSTRAINT events_legacy_upto;

ALTER TABLE relayops.deliveries VALIDATE CONSTRAINT deliveries_legacy_upto;

ALTER TABLE relayops.delivery_attempts VALIDATE CONSTRAINT delivery_attempts_legacy_upto;
