-- Group commit of 16 events (`repo::event_batches::INGEST_MANY`, before issue 18
-- item 2), parameters as literals (scripts/bench-fanout-sql.sh).
WITH ids AS MATERIALIZED (SELECT relayops.delivery_id_for(relayops.uuid_floor(clock_timestamp())) AS id FROM generate_series(1, 16)),
     input AS (SELECT id, (:tenant)::uuid AS tenant_id, 'order.created'::text AS event_type, '{"n": 1}'::jsonb AS payload,
                      NULL::text AS idempotency_key, sha256('x'::bytea) AS request_hash, 'ten_x'::text AS tenant_text,
                      'evt_' || replace(id::text, '-', '') AS id_text FROM ids),
     key AS (
         INSERT INTO relayops.idempotency_keys AS k (tenant_id, idempotency_key, event_id, request_hash)
         SELECT tenant_id, idempotency_key, id, request_hash FROM input
         WHERE idempotency_key IS NOT NULL
         ORDER BY tenant_id, idempotency_key
         ON CONFLICT (tenant_id, idempotency_key) DO UPDATE
             SET event_id = EXCLUDED.event_id, request_hash = EXCLUDED.request_hash, created_at = now()
             WHERE k.created_at < now() - 86400::bigint * interval '1 second'
                OR NOT relayops.event_exists(k.event_id)
         RETURNING k.event_id),
     new_event AS (
         INSERT INTO relayops.events (id, tenant_id, event_type, payload, idempotency_key, request_hash)
         SELECT id, tenant_id, event_type, payload, idempotency_key, request_hash FROM input
         WHERE idempotency_key IS NULL OR id IN (SELECT event_id FROM key)
         RETURNING id, tenant_id, event_type, received_at),
     new_deliveries AS (
         INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id)
         SELECT relayops.delivery_id_for(e.id), ep.tenant_id, e.id, ep.id
         FROM new_event e JOIN relayops.webhook_endpoints ep ON ep.tenant_id = e.tenant_id
         WHERE ep.enabled AND ep.kind = 'webhook'
           AND EXISTS (
             SELECT 1 FROM relayops.endpoint_subscriptions s
             WHERE s.tenant_id = ep.tenant_id AND s.endpoint_id = ep.id
               AND (s.event_type_pattern = e.event_type
                    OR s.event_type_pattern = '*'
                    OR (right(s.event_type_pattern, 2) = '.*'
                        AND starts_with(e.event_type, left(s.event_type_pattern, -1)))))
         RETURNING id, tenant_id, event_id, endpoint_id),
     new_outbox AS (
         INSERT INTO relayops.outbox_messages (tenant_id, delivery_id, envelope)
         SELECT d.tenant_id, d.id, jsonb_build_object(
             'type', 'delivery.v1',
             'tenant_id', i.tenant_text,
             'delivery_id', 'dlv_' || replace(d.id::text, '-', ''),
             'event_id', i.id_text,
             'endpoint_id', 'ep_' || replace(d.endpoint_id::text, '-', ''))
         FROM new_deliveries d JOIN input i ON i.id = d.event_id)
     SELECT e.id, e.received_at, coalesce(fanned.deliveries, 0) AS deliveries
     FROM new_event e
     LEFT JOIN (SELECT event_id, count(*) AS deliveries FROM new_deliveries GROUP BY event_id) fanned
            ON fanned.event_id = e.id;
