-- The publisher claims outbox rows fairly between tenants (SPEC §12; issue
-- 51): each claim walks the tenants with pending rows, one index probe per
-- tenant, and takes each one's oldest rows in turn. Rows written claimed
-- (handed over in-process) never enter this index.
CREATE INDEX outbox_messages_pending_tenant_idx ON relayops.outbox_messages (tenant_id, id) WHERE status = 'pending';
