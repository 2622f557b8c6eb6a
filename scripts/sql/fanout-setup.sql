-- Three tenants with 1, 10 and 100 webhook endpoints subscribed to everything
-- (scripts/bench-fanout-sql.sh).
INSERT INTO relayops.tenants (id, name) VALUES
  ('00000000-0000-0000-0000-000000000001', 'one'),
  ('00000000-0000-0000-0000-000000000010', 'ten'),
  ('00000000-0000-0000-0000-000000000100', 'hundred')
ON CONFLICT DO NOTHING;
INSERT INTO relayops.webhook_endpoints (id, tenant_id, url, secret)
SELECT gen_random_uuid(), t.id, 'http://127.0.0.1:9/hook', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
FROM relayops.tenants t, generate_series(1, 100) n
WHERE n <= right(t.id::text, 3)::int
  AND t.id IN ('00000000-0000-0000-0000-000000000001','00000000-0000-0000-0000-000000000010','00000000-0000-0000-0000-000000000100');
INSERT INTO relayops.endpoint_subscriptions (id, tenant_id, endpoint_id, event_type_pattern)
SELECT gen_random_uuid(), tenant_id, id, '*' FROM relayops.webhook_endpoints;
