-- The publisher's delete after the confirms (`repo::outbox::DELETE_PUBLISHED`).
DELETE FROM relayops.outbox_messages WHERE id = ANY((:ids)::bigint[]) AND status = 'claimed' AND claimed_by = 'b' RETURNING id;
