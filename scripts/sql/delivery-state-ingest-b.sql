-- Ingest writes the row and its narrow state (scripts/bench-delivery-state-sql.sh; `n` rows).
BEGIN;
WITH ins AS (INSERT INTO deliveries_b (id, tenant_id, event_id, endpoint_id)
  SELECT v7(), '00000000-0000-7000-8000-000000000001', v7(), '00000000-0000-7000-8000-000000000002' FROM generate_series(1, :n) RETURNING id, tenant_id, endpoint_id),
 st AS (INSERT INTO delivery_state (id, tenant_id, endpoint_id) SELECT id, tenant_id, endpoint_id FROM ins)
SELECT array_agg(id)::text AS ids FROM ins \gset
COMMIT;
