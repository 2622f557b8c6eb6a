-- Recovery re-enqueues `pending` deliveries whose message the broker lost
-- (dropped at the ready queue's delivery limit, or a claim undone by a database
-- crash): pending for longer than the grace, with no unpublished or recently
-- published outbox row. This partial index keeps that sweep to the oldest few
-- pending rows instead of a scan; a pending row is short-lived, so the index
-- stays as small as the work not yet claimed.
CREATE INDEX deliveries_pending_since_idx ON relayops.deliveries (updated_at) WHERE status = 'pending';
