-- One outbox row per event instead of one per delivery (issue 18): ingest of
-- an unordered event writes a single `event_deliveries.v1` row, which the
-- publisher expands into a `delivery.v1` message per pending delivery of the
-- event. The row names its event here, so the recovery pass can tell that a
-- pending delivery's message is still waiting in the outbox (as it does by
-- `delivery_id` for `delivery.v1` rows). The outbox holds only the work in
-- flight, so building the index is quick; rows of other kinds leave it NULL
-- and stay out of the partial index.
ALTER TABLE relayops.outbox_messages ADD COLUMN event_id uuid;
CREATE INDEX outbox_messages_event_idx ON relayops.outbox_messages (event_id) WHERE event_id IS NOT NULL;
