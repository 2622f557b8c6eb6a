-- Ingest of one event (`repo::events::INGEST`, after issue 18 item 2), parameters
-- as literals, the event id made in SQL (scripts/bench-fanout-sql.sh).
WITH p AS MATERIALIZED (SELECT relayops.delivery_id_for(relayops.uuid_floor(clock_timestamp())) AS id),
     key AS (
         INSERT INTO relayops.idempotency_keys AS k (tenant_id, idempotency_key, event_id, request_hash)
         SELECT (:tenant)::uuid, NULL::text, (SELECT id FROM p), sha256('x'::bytea) WHERE NULL::text::text IS NOT NULL
         ON CONFLICT (tenant_id, idempotency_key) DO UPDATE
             SET event_id = EXCLUDED.event_id, request_hash = EXCLUDED.request_hash, created_at = now()
             WHERE k.created_at < now() - 86400::bigint * interval '1 second'
                OR NOT relayops.event_exists(k.event_id)
         RETURNING 1),
     new_event AS (
         INSERT INTO relayops.events (id, tenant_id, event_type, payload, idempotency_key, request_hash)
         SELECT (SELECT id FROM p), (:tenant)::uuid, 'order.created'::text, '{"n": 1}'::jsonb, NULL::text, sha256('x'::bytea)
         WHERE NULL::text::text IS NULL OR EXISTS (SELECT 1 FROM key)
         RETURNING id, tenant_id, received_at),
     new_deliveries AS (
         INSERT INTO relayops.deliveries (id, tenant_id, event_id, endpoint_id)
         SELECT relayops.delivery_id_for(new_event.id), ep.tenant_id, new_event.id, ep.id
         FROM new_event JOIN relayops.webhook_endpoints ep ON ep.tenant_id = new_event.tenant_id
         WHERE ep.enabled AND ep.kind = 'webhook'
           AND EXISTS (
             SELECT 1 FROM relayops.endpoint_subscriptions s
             WHERE s.tenant_id = ep.tenant_id AND s.endpoint_id = ep.id
               AND (s.event_type_pattern = 'order.created'::text
                    OR s.event_type_pattern = '*'
                    OR (right(s.event_type_pattern, 2) = '.*'
                        AND starts_with('order.created'::text, left(s.event_type_pattern, -1)))))
         RETURNING id, endpoint_id),
     new_outbox AS (
         INSERT INTO relayops.outbox_messages (tenant_id, event_id, envelope)
         SELECT (:tenant)::uuid, (SELECT id FROM p), jsonb_build_object('type', 'event_deliveries.v1', 'tenant_id', 'ten_x'::text, 'event_id', ('evt_' || replace((SELECT id FROM p)::text, '-', ''))::text)
         WHERE EXISTS (SELECT 1 FROM new_deliveries))
     SELECT received_at, (SELECT count(*) FROM new_deliveries) AS deliveries FROM new_event;
