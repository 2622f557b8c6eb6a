-- Deliveries wait for a slot of their endpoint as parked rows (SPEC §12):
-- a delivery turned away because its endpoint had `max_in_flight` requests
-- in flight is parked without a give-up time (`next_attempt_at` NULL) and a
-- worker admits it when a slot frees. Should the endpoint's circuit open
-- meanwhile, the recovery pass starts its retry policy's clock
-- (`repo::parked_expiry::start_clocks`), finding such rows here.
CREATE INDEX deliveries_partitioned_waiting_for_slot_idx ON relayops.deliveries (endpoint_id)
    WHERE status = 'parked' AND next_attempt_at IS NULL;
