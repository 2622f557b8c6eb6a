-- The claim, a transaction of its own: in_progress with a lease (@STATE@: the table holding the state).
BEGIN;
UPDATE @STATE@ SET status = 'in_progress', lease_owner = 'worker-1', lease_expires_at = now() + interval '30 s', updated_at = now()
 WHERE id = ANY(:ids::uuid[]) AND status = 'pending';
COMMIT;
BEGIN;
