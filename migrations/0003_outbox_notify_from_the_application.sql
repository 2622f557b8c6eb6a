-- The statement trigger of 0002 made every ingest transaction send NOTIFY, and
-- Postgres serialises the commits of notifying transactions: under load that
-- cost more than it saved (ingest fell from ~4,500 to ~2,800 events/s in the
-- benchmark). The application now sends one debounced NOTIFY per process after
-- its commits instead (`db::listen::PgNotifier`).
DROP TRIGGER outbox_messages_notify ON relayops.outbox_messages;
DROP FUNCTION relayops.notify_outbox();
