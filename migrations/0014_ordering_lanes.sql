-- Ordering lanes (issue 17, SPEC §11): events posted with an `ordering_key`
-- are delivered to each endpoint one at a time per key, in the order they were
-- accepted. `events.ordering_key` exists since 0001 (reserved); deliveries
-- carry it too, so the worker's claim sees it without reading the event.
-- Both columns are NULL for unordered events (adding a nullable column
-- without a default rewrites nothing, on the partitions either).
ALTER TABLE relayops.deliveries ADD COLUMN ordering_key text;

-- One row per (endpoint, ordering key) that has a delivery in flight: the
-- lane's head is the one delivery of the lane that may be claimed (it is
-- pending, in progress or scheduled for a retry). A lane with nothing in
-- flight has no row. `last_seq` is the position the latest delivery to join
-- the lane was given; ingest takes the row's lock to join it, so positions
-- follow the order in which the events were accepted (committed).
CREATE TABLE relayops.ordering_lanes (
    tenant_id        uuid NOT NULL,
    endpoint_id      uuid NOT NULL,
    ordering_key     text NOT NULL CHECK (length(ordering_key) BETWEEN 1 AND 256),
    last_seq         bigint NOT NULL,
    head_delivery_id uuid NOT NULL,
    head_event_id    uuid NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, endpoint_id, ordering_key),
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES relayops.webhook_endpoints (tenant_id, id) ON DELETE CASCADE
);

-- The deliveries waiting behind a lane's head, by position. A waiting
-- delivery is `scheduled` with no `next_attempt_at`: no claim takes it, no
-- recovery pass re-enqueues it, and its history window is kept (it is
-- unfinished). The head's settle moves the lowest position to the head, in its
-- own transaction. The foreign key to the lane is NO ACTION on purpose: a lane
-- is removed only when nothing waits, and a bug that tried otherwise fails
-- instead of stranding the waiting deliveries.
CREATE TABLE relayops.ordering_lane_waiting (
    tenant_id    uuid NOT NULL,
    endpoint_id  uuid NOT NULL,
    ordering_key text NOT NULL,
    seq          bigint NOT NULL,
    delivery_id  uuid NOT NULL,
    event_id     uuid NOT NULL,
    PRIMARY KEY (tenant_id, endpoint_id, ordering_key, seq),
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES relayops.webhook_endpoints (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, endpoint_id, ordering_key) REFERENCES relayops.ordering_lanes (tenant_id, endpoint_id, ordering_key)
);
-- Replay asks whether a delivery is waiting (it may not jump its lane).
CREATE INDEX ordering_lane_waiting_delivery_idx ON relayops.ordering_lane_waiting (delivery_id);
