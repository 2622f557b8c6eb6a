-- The record (in the transaction the step before opened): delivered, and the attempt row.
WITH s AS (UPDATE @STATE@ SET status = 'delivered', attempt_count = 1, lease_owner = NULL, lease_expires_at = NULL, last_http_status = 200,
  delivered_at = now(), updated_at = now() WHERE id = ANY(:ids::uuid[]) AND @HELD@ RETURNING id, tenant_id)
INSERT INTO attempts (id, tenant_id, delivery_id, attempt_number, outcome, http_status, request_headers, latency_ms, worker_id, started_at)
 SELECT relayops.delivery_id_for(id), tenant_id, id, 1, 'delivered', 200, '{"content-type":"application/json","webhook-id":"msg_x","webhook-signature":"v1,abcdefghijklmnopqrstuvwxyz0123456789"}', 3, 'worker-1', now() FROM s;
COMMIT;
