-- Deliveries of an event with many subscribers written after ingest (issue
-- 18): ingest of an unordered event that matches more endpoints than
-- RELAYOPS_FANOUT_AT_INGEST_MAX writes the event and ONE outbox row in
-- status `fanout` naming the endpoints it matched (`fanout_endpoints`); a
-- publisher writes the deliveries in one set-based statement and turns the
-- row into the `event_deliveries.v1` row ingest writes for smaller events
-- (`pending`), in that same statement (repo::deferred_deliveries),
-- without needing the broker. Ingest's cost then no longer grows with the
-- subscribers. The outbox holds only the work in flight, so changing its
-- constraint and building the index is quick.
ALTER TABLE relayops.outbox_messages ADD COLUMN fanout_endpoints uuid[];
ALTER TABLE relayops.outbox_messages DROP CONSTRAINT outbox_messages_status_check;
ALTER TABLE relayops.outbox_messages ADD CONSTRAINT outbox_messages_status_check
    CHECK (status IN ('pending', 'claimed', 'published', 'fanout'));
ALTER TABLE relayops.outbox_messages ADD CONSTRAINT outbox_messages_fanout_check
    CHECK ((status = 'fanout') = (fanout_endpoints IS NOT NULL));
CREATE INDEX outbox_messages_fanout_idx ON relayops.outbox_messages (id) WHERE status = 'fanout';
