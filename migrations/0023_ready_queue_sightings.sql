-- Recovery tells waiting from lost (SPEC §12): a delivery's message is
-- presumed lost only once its ready queue has been seen empty after the
-- message entered it, and that sighting is older than the recovery grace —
-- by then the message was handed to a consumer long ago, so a row still
-- waiting for it lost it. A message waiting its turn on a long ready queue
-- (a tenant's backlog, a broker outage's backlog) is never re-enqueued.
-- Publishers record the sightings from their depth samples (a passive
-- declare of each ready queue a few times a second).
CREATE TABLE relayops.ready_queue_sightings (
    queue              text PRIMARY KEY,
    -- A time the queue held no ready message, kept until it is older than
    -- the recovery grace (later sightings meanwhile are dropped); then it
    -- moves to `seen_empty_before` and the next sighting takes its place.
    seen_empty_at      timestamptz NOT NULL,
    -- The previous one: the search's time while `seen_empty_at` is younger
    -- than the grace.
    seen_empty_before  timestamptz
);
