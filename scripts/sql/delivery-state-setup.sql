-- Two shapes of a delivery's rows, for scripts/bench-delivery-state-sql.sh (plain
-- tables: one partition's worth, no foreign keys), in a migrated database. A is
-- today's row (a deliveries partition's indexes and CHECKs); B keeps the row's
-- changing state in a narrow table of its own, with the status-filtered list
-- indexes partial on unfinished rows (delivered ones: the created index, filtered).
-- A: today's deliveries row and its attempts, copied from the migrated schema
-- (columns, CHECKs, indexes), plus the unique index on `id` every partition gets
-- (`db::partitions::create_id_key`).
CREATE TABLE deliveries_a (LIKE relayops.deliveries INCLUDING ALL);
ALTER TABLE deliveries_a ADD UNIQUE (id);
CREATE TABLE attempts (LIKE relayops.delivery_attempts INCLUDING ALL);
-- B: the same row without its changing state, and a narrow state table
CREATE TABLE deliveries_b (
 id uuid NOT NULL, tenant_id uuid NOT NULL, event_id uuid NOT NULL, endpoint_id uuid NOT NULL,
 created_at timestamptz NOT NULL DEFAULT now(), ordering_key text,
 UNIQUE (event_id, endpoint_id), UNIQUE (id));
CREATE INDEX ON deliveries_b (tenant_id, endpoint_id, created_at DESC, id DESC);
CREATE INDEX ON deliveries_b (tenant_id, created_at DESC, id DESC);
CREATE INDEX ON deliveries_b (tenant_id, ordering_key, created_at DESC, id DESC) WHERE ordering_key IS NOT NULL;
CREATE TABLE delivery_state (
 id uuid PRIMARY KEY, tenant_id uuid NOT NULL, endpoint_id uuid NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
 status text NOT NULL DEFAULT 'pending', attempt_count int NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
 next_attempt_at timestamptz, lease_owner text, lease_expires_at timestamptz, last_http_status int, last_error text,
 delivered_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now(),
 CHECK ((status = 'in_progress') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)),
 CHECK (status = ANY (ARRAY['pending','in_progress','scheduled','delivered','failed','dead']))) WITH (fillfactor = 80);
CREATE INDEX ON delivery_state (next_attempt_at) WHERE status = 'scheduled';
CREATE INDEX ON delivery_state (lease_expires_at) WHERE status = 'in_progress';
CREATE INDEX ON delivery_state (updated_at) WHERE status = 'pending';
-- status-filtered lists of unfinished and dead rows (delivered ones: the created index, filtered)
CREATE INDEX ON delivery_state (tenant_id, status, created_at DESC, id DESC) WHERE status <> 'delivered';
CREATE INDEX ON delivery_state (tenant_id, endpoint_id, status, created_at DESC, id DESC) WHERE status <> 'delivered';
-- The bench vacuums after each run (and counts it): no run pays for another's dead rows.
ALTER TABLE deliveries_a SET (autovacuum_enabled = off);
ALTER TABLE deliveries_b SET (autovacuum_enabled = off);
ALTER TABLE delivery_state SET (autovacuum_enabled = off);
ALTER TABLE attempts SET (autovacuum_enabled = off);
