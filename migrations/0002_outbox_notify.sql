-- Wake long-lived publishers as soon as outbox rows are committed, instead of
-- waiting for their idle interval. One notification per inserting statement;
-- Postgres folds identical notifications within a transaction into one and
-- delivers them only on commit, so a rolled-back ingest wakes nobody.
CREATE FUNCTION relayops.notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('relayops_outbox', '');
    RETURN NULL;
END $$;

CREATE TRIGGER outbox_messages_notify
    AFTER INSERT ON relayops.outbox_messages
    FOR EACH STATEMENT EXECUTE FUNCTION relayops.notify_outbox();
