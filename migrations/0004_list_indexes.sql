-- Keyset pages for operator lists (newest first by (time, id)): every filter
-- combination the query API offers walks an index in list order, so a page
-- costs its own size, however deep it is.
CREATE INDEX deliveries_tenant_created_idx ON relayops.deliveries (tenant_id, created_at DESC, id DESC);
CREATE INDEX deliveries_endpoint_created_idx ON relayops.deliveries (tenant_id, endpoint_id, created_at DESC, id DESC);
-- The event-type list gains `id` so its order is total (a keyset needs that).
CREATE INDEX events_tenant_type_received_id_idx ON relayops.events (tenant_id, event_type, received_at DESC, id DESC);
DROP INDEX relayops.events_tenant_type_received_idx;
