-- Per-statement WAL (EXPLAIN (ANALYZE, WAL)): immune to other databases' WAL on the shared server.
CREATE OR REPLACE FUNCTION wal_of(statement text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE plan json;
BEGIN
  EXECUTE 'EXPLAIN (ANALYZE, WAL, FORMAT JSON) ' || statement INTO plan;
  RETURN (plan->0->'Plan'->>'WAL Bytes')::bigint;
END $$;
CREATE TABLE IF NOT EXISTS wal_result (variant text, step text, bytes bigint, rows bigint);
CREATE OR REPLACE PROCEDURE wal_run(delete_on_publish boolean, batches int) LANGUAGE plpgsql AS $$
DECLARE ids bigint[]; b bigint; v text := CASE WHEN delete_on_publish THEN 'B' ELSE 'A' END;
BEGIN
  FOR i IN 1..batches LOOP
    b := wal_of($q$UPDATE ob o SET status = 'claimed', claimed_by = 'p', claim_expires_at = now() + interval '30 seconds',
                    publish_attempts = o.publish_attempts + 1
       WHERE o.id IN (SELECT id FROM ob WHERE status = 'pending' AND available_at <= now() ORDER BY id LIMIT 200
                      FOR UPDATE SKIP LOCKED)$q$);
    INSERT INTO wal_result VALUES (v, 'claim', b, 200);
    COMMIT;
    IF delete_on_publish THEN
      b := wal_of($q$DELETE FROM ob WHERE status = 'claimed' AND claimed_by = 'p'$q$);
      INSERT INTO wal_result VALUES (v, 'delete', b, 200);
    ELSE
      b := wal_of($q$UPDATE ob SET status = 'published', published_at = now(), claimed_by = NULL, claim_expires_at = NULL,
                      last_error = NULL WHERE status = 'claimed' AND claimed_by = 'p'$q$);
      INSERT INTO wal_result VALUES (v, 'mark', b, 200);
    END IF;
    COMMIT;
  END LOOP;
  IF NOT delete_on_publish THEN
    b := wal_of($q$DELETE FROM ob WHERE id IN (SELECT id FROM ob WHERE status = 'published' AND published_at < now() LIMIT 5000)$q$);
    INSERT INTO wal_result VALUES (v, 'purge', b, 5000);
    COMMIT;
  END IF;
END $$;
