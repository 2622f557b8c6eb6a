-- Upgrade to time-partitioned history (issue 14), step 2 of 2: the swap, in
-- one transaction. Nothing here scans a table (0007 built the indexes,
-- proved the bounds and copied the idempotency keys), so the pause is the time
-- to take the locks, rename, attach and copy the keys of the last minutes.
--
-- Partition keys (ids are UUIDv7, time-ordered; a time is a uuid bound):
--   events            by id
--   deliveries        by event_id (a delivery lives in its event's partition;
--                     new delivery ids carry the event id's time, so an id
--                     names its partition: relayops.event_id_floor/ceiling)
--   delivery_attempts by id (the attempt's own time; attempts come after their
--                     delivery, so they are dropped after it)
-- The tables of one time window are created and dropped together by the
-- partition manager (shared::db::partitions). No DEFAULT partition, so old
-- partitions can be detached CONCURRENTLY. Rows that exist now become one
-- partition per table, `*_legacy`, bounded above by 0007's bound and dropped
-- like any other once it is older than the retention.
--
-- Unique keys must hold the partition key, so idempotency moves to its own
-- table, and the foreign keys between these tables (and from the outbox) go:
-- the manager keeps a window's rows together instead.

LOCK TABLE relayops.outbox_messages, relayops.delivery_attempts, relayops.deliveries, relayops.events
    IN ACCESS EXCLUSIVE MODE;

ALTER TABLE relayops.outbox_messages DROP CONSTRAINT outbox_messages_tenant_id_delivery_id_fkey;
ALTER TABLE relayops.delivery_attempts DROP CONSTRAINT delivery_attempts_tenant_id_delivery_id_fkey;
ALTER TABLE relayops.deliveries DROP CONSTRAINT deliveries_tenant_id_event_id_fkey;
ALTER TABLE relayops.deliveries DROP CONSTRAINT deliveries_tenant_id_id_key;
ALTER TABLE relayops.events DROP CONSTRAINT events_tenant_id_id_key;

-- The idempotency keys that came after 0007 copied the window (a margin for
-- ingest transactions that were running then).
INSERT INTO relayops.idempotency_keys (tenant_id, idempotency_key, event_id, request_hash, created_at)
SELECT tenant_id, idempotency_key, id, request_hash, received_at
FROM relayops.events
WHERE idempotency_key IS NOT NULL
  AND received_at >= (SELECT keys_copied_at - interval '10 minutes' FROM relayops.history_upgrade)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING;

DROP INDEX relayops.events_keyed_received_idx;
ALTER TABLE relayops.events DROP CONSTRAINT events_tenant_id_idempotency_key_key;

ALTER TABLE relayops.events RENAME TO events_legacy;
ALTER TABLE relayops.deliveries RENAME TO deliveries_legacy;
ALTER TABLE relayops.delivery_attempts RENAME TO delivery_attempts_legacy;

-- Parents: the same columns, defaults and CHECKs; the keys and indexes match
-- the legacy tables' so attaching them reuses what exists.
CREATE TABLE relayops.events (LIKE relayops.events_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);
ALTER TABLE relayops.events DROP CONSTRAINT events_legacy_upto;
ALTER TABLE relayops.events
    ADD CONSTRAINT events_partitioned_pkey PRIMARY KEY (id),
    ADD CONSTRAINT events_partitioned_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES relayops.tenants (id) ON DELETE CASCADE;
CREATE INDEX events_partitioned_received_idx ON relayops.events (tenant_id, received_at DESC, id DESC);
CREATE INDEX events_partitioned_type_received_idx ON relayops.events (tenant_id, event_type, received_at DESC, id DESC);

CREATE TABLE relayops.deliveries (LIKE relayops.deliveries_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (event_id);
ALTER TABLE relayops.deliveries DROP CONSTRAINT deliveries_legacy_upto;
ALTER TABLE relayops.deliveries_legacy
    ADD CONSTRAINT deliveries_legacy_id_event_id_key UNIQUE USING INDEX deliveries_id_event_id_key;
ALTER TABLE relayops.deliveries
    ADD CONSTRAINT deliveries_partitioned_id_key UNIQUE (id, event_id),
    ADD CONSTRAINT deliveries_partitioned_event_endpoint_key UNIQUE (event_id, endpoint_id),
    ADD CONSTRAINT deliveries_partitioned_endpoint_fkey FOREIGN KEY (tenant_id, endpoint_id)
        REFERENCES relayops.webhook_endpoints (tenant_id, id) ON DELETE CASCADE;
CREATE INDEX deliveries_partitioned_expired_lease_idx ON relayops.deliveries (lease_expires_at) WHERE status = 'in_progress';
CREATE INDEX deliveries_partitioned_due_retry_idx ON relayops.deliveries (next_attempt_at) WHERE status = 'scheduled';
CREATE INDEX deliveries_partitioned_pending_since_idx ON relayops.deliveries (updated_at) WHERE status = 'pending';
CREATE INDEX deliveries_partitioned_tenant_status_idx ON relayops.deliveries (tenant_id, status, created_at DESC, id DESC);
CREATE INDEX deliveries_partitioned_endpoint_status_idx ON relayops.deliveries (tenant_id, endpoint_id, status, created_at DESC, id DESC);
CREATE INDEX deliveries_partitioned_tenant_created_idx ON relayops.deliveries (tenant_id, created_at DESC, id DESC);
CREATE INDEX deliveries_partitioned_endpoint_created_idx ON relayops.deliveries (tenant_id, endpoint_id, created_at DESC, id DESC);

CREATE TABLE relayops.delivery_attempts (LIKE relayops.delivery_attempts_legacy INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (id);
ALTER TABLE relayops.delivery_attempts DROP CONSTRAINT delivery_attempts_legacy_upto;
ALTER TABLE relayops.delivery_attempts ADD CONSTRAINT delivery_attempts_partitioned_pkey PRIMARY KEY (id);
CREATE INDEX delivery_attempts_partitioned_lookup_idx ON relayops.delivery_attempts (tenant_id, delivery_id, attempt_number);

-- The existing rows: one partition per table, or nothing on a new installation.
DO $$
DECLARE
    upto uuid := (SELECT legacy_upto FROM relayops.history_upgrade);
BEGIN
    IF EXISTS (SELECT 1 FROM relayops.events_legacy)
       OR EXISTS (SELECT 1 FROM relayops.deliveries_legacy)
       OR EXISTS (SELECT 1 FROM relayops.delivery_attempts_legacy) THEN
        EXECUTE format('ALTER TABLE relayops.events ATTACH PARTITION relayops.events_legacy
                        FOR VALUES FROM (MINVALUE) TO (%L)', upto);
        EXECUTE format('ALTER TABLE relayops.deliveries ATTACH PARTITION relayops.deliveries_legacy
                        FOR VALUES FROM (MINVALUE) TO (%L)', upto);
        EXECUTE format('ALTER TABLE relayops.delivery_attempts ATTACH PARTITION relayops.delivery_attempts_legacy
                        FOR VALUES FROM (MINVALUE) TO (%L)', upto);
        ALTER TABLE relayops.events_legacy DROP CONSTRAINT events_legacy_upto;
        ALTER TABLE relayops.deliveries_legacy DROP CONSTRAINT deliveries_legacy_upto;
        ALTER TABLE relayops.delivery_attempts_legacy DROP CONSTRAINT delivery_attempts_legacy_upto;
    ELSE
        DROP TABLE relayops.delivery_attempts_legacy, relayops.deliveries_legacy, relayops.events_legacy;
    END IF;
END $$;
DROP TABLE relayops.history_upgrade;

-- A time as the smallest UUIDv7 of its millisecond.
CREATE FUNCTION relayops.uuid_floor(at timestamptz) RETURNS uuid
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid;

-- A new delivery id for an event: UUIDv7 with the event id's millisecond, so
-- the delivery id alone names the partition its row is in.
CREATE FUNCTION relayops.delivery_id_for(event_id uuid) RETURNS uuid
    LANGUAGE sql VOLATILE PARALLEL SAFE
    RETURN (left(event_id::text, 13) || '-7' || substr(gen_random_uuid()::text, 16))::uuid;

-- The range of event ids a delivery id can belong to: its millisecond for a
-- UUIDv7 id (made by delivery_id_for); anything for an older, random (v4) id.
CREATE FUNCTION relayops.event_id_floor(delivery_id uuid) RETURNS uuid
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN substr(delivery_id::text, 15, 1) = '7'
                THEN (left(delivery_id::text, 13) || '-0000-0000-000000000000')::uuid
                ELSE '00000000-0000-0000-0000-000000000000'::uuid END;

CREATE FUNCTION relayops.event_id_ceiling(delivery_id uuid) RETURNS uuid
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN substr(delivery_id::text, 15, 1) = '7'
                THEN (left(delivery_id::text, 13) || '-ffff-ffff-ffffffffffff')::uuid
                ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid END;
