-- Ingest writes today's row (scripts/bench-delivery-state-sql.sh; `n` rows).
BEGIN;
WITH ins AS (INSERT INTO deliveries_a (id, tenant_id, event_id, endpoint_id)
  SELECT relayops.delivery_id_for(e.id), '00000000-0000-7000-8000-000000000001', e.id, '00000000-0000-7000-8000-000000000002'
  FROM (SELECT relayops.delivery_id_for(relayops.uuid_floor(clock_timestamp())) AS id FROM generate_series(1, :n)) e RETURNING id)
SELECT array_agg(id)::text AS ids FROM ins \gset
COMMIT;
