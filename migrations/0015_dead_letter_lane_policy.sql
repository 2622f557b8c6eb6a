-- What a dead letter does to its ordering lane, per endpoint (issue 17):
-- `release` (the default: the next delivery of the key goes on) or `block`
-- (the lane waits until the dead delivery is replayed or skipped). A NOT NULL
-- column with a constant default is a catalog change only.
ALTER TABLE relayops.webhook_endpoints
    ADD COLUMN dead_letter_lane text NOT NULL DEFAULT 'release' CHECK (dead_letter_lane IN ('release', 'block'));

-- Set while the lane's head is dead and its endpoint blocks: nothing behind it
-- is sent until a replay of the head (it becomes pending again) or a skip
-- (the lane moves on past it) clears it.
ALTER TABLE relayops.ordering_lanes ADD COLUMN blocked_since timestamptz;
CREATE INDEX ordering_lanes_blocked_idx ON relayops.ordering_lanes (tenant_id, endpoint_id, blocked_since, head_delivery_id)
    WHERE blocked_since IS NOT NULL;

-- The lists' `ordering_key` filter. Partial: unordered rows (ordering_key
-- NULL) add no entry, so the unordered write path pays nothing. Upgrade cost:
-- building them reads every existing partition once under a SHARE lock
-- (writes wait for it), though no existing row has a key yet.
CREATE INDEX events_partitioned_ordering_key_idx ON relayops.events (tenant_id, ordering_key, received_at DESC, id DESC)
    WHERE ordering_key IS NOT NULL;
CREATE INDEX deliveries_partitioned_ordering_key_idx ON relayops.deliveries (tenant_id, ordering_key, created_at DESC, id DESC)
    WHERE ordering_key IS NOT NULL;
