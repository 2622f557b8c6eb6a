-- Two requests with the same idempotency key at once: the second waits on the
-- key's unique index for the first to commit, then asks whether the key's
-- event exists before taking the key over. A STABLE function answers with the
-- snapshot its statement started with, taken before the first request
-- committed: it did not see that event, so the second request took the key
-- over and wrote a second event (both answered 201). VOLATILE, its query takes
-- a new snapshot and sees the committed event: the second request is answered
-- as a repeat (or a conflict), as a key promises.
ALTER FUNCTION relayops.event_exists(uuid) VOLATILE;
