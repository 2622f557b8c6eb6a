-- Ingest writes today's row (scripts/bench-delivery-state-sql.sh; `n` rows).
BEGIN;
WITH ins AS (INSERT INTO deliveries_a (id, tenant_id, event_id, endpoint_id)
  SELECT v7(), '00000000-0000-7000-8000-000000000001', v7(), '00000000-0000-7000-8000-000000000002' FROM generate_series(1, :n) RETURNING id)
SELECT array_agg(id)::text AS ids FROM ins \gset
COMMIT;
