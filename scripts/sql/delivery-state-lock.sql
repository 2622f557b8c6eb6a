-- No claim write: the record's transaction locks the rows first (in a worker it would stay open over the request).
BEGIN;
SELECT count(*) FROM (SELECT id FROM @STATE@ WHERE id = ANY(:ids::uuid[]) AND status = 'pending' FOR UPDATE) locked;
