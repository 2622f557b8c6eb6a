-- The publisher deletes an outbox row once the broker confirmed its message
-- (issue 14): published rows are no longer kept and purged later.

-- What the kept rows told the recovery pass ("was this delivery's message
-- published within the grace?") now comes from watermarks the pass samples
-- about once a second: at `sampled_at`, every outbox row created before
-- `published_before` had been published. A pending delivery whose row was
-- written before the watermark of a sample older than the grace had its
-- message published longer than the grace ago (see repo::recovery).
CREATE TABLE relayops.outbox_watermarks (
    sampled_at       timestamptz PRIMARY KEY,
    published_before timestamptz NOT NULL
);

-- Rows published under the old scheme, and the index that found them. (A
-- publisher of the previous release still running during a rolling upgrade
-- marks rows published and purges them, without the index, for an hour; the
-- recovery pass ignores such rows. Any left once it is gone can be removed
-- with `DELETE FROM relayops.outbox_messages WHERE status = 'published'`.)
DELETE FROM relayops.outbox_messages WHERE status = 'published';
DROP INDEX relayops.outbox_messages_published_idx;
