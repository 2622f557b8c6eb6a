-- The outbox as in migration 0001 (table "ob" in a scratch database), :rows
-- pending rows, and the two ways to settle a published batch (scripts/bench-outbox-settle.sh).
DROP TABLE IF EXISTS ob;
CREATE TABLE ob (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        uuid NOT NULL,
    delivery_id      uuid,
    envelope         jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'claimed', 'published')),
    available_at     timestamptz NOT NULL DEFAULT now(),
    claimed_by       text,
    claim_expires_at timestamptz,
    publish_attempts integer NOT NULL DEFAULT 0,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    published_at     timestamptz);
CREATE INDEX ob_pending_idx ON ob (id) WHERE status = 'pending';
CREATE INDEX ob_claimed_idx ON ob (claim_expires_at) WHERE status = 'claimed';
CREATE INDEX ob_published_idx ON ob (published_at) WHERE status = 'published';
CREATE INDEX ob_delivery_idx ON ob (delivery_id);
INSERT INTO ob (tenant_id, delivery_id, envelope)
SELECT gen_random_uuid(), gen_random_uuid(),
       jsonb_build_object('type', 'delivery.v1', 'tenant_id', gen_random_uuid(), 'delivery_id', gen_random_uuid(),
                          'event_id', gen_random_uuid(), 'endpoint_id', gen_random_uuid())
FROM generate_series(1, :rows);
VACUUM ANALYZE ob;
CREATE OR REPLACE PROCEDURE publish_all(delete_on_publish boolean) LANGUAGE plpgsql AS $$
DECLARE ids bigint[]; n bigint;
BEGIN
  LOOP
    UPDATE ob o SET status = 'claimed', claimed_by = 'p', claim_expires_at = now() + interval '30 seconds',
                    publish_attempts = o.publish_attempts + 1
    WHERE o.id IN (SELECT id FROM ob WHERE status = 'pending' AND available_at <= now() ORDER BY id LIMIT 200
                   FOR UPDATE SKIP LOCKED);
    SELECT array_agg(id) INTO ids FROM ob WHERE status = 'claimed' AND claimed_by = 'p';
    COMMIT;
    EXIT WHEN ids IS NULL;
    IF delete_on_publish THEN
      DELETE FROM ob WHERE id = ANY(ids) AND status = 'claimed' AND claimed_by = 'p';
    ELSE
      UPDATE ob SET status = 'published', published_at = now(), claimed_by = NULL, claim_expires_at = NULL,
                    last_error = NULL
      WHERE id = ANY(ids) AND status = 'claimed' AND claimed_by = 'p';
    END IF;
    COMMIT;
  END LOOP;
END $$;
CREATE OR REPLACE PROCEDURE purge_all() LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  LOOP
    DELETE FROM ob WHERE id IN (SELECT id FROM ob WHERE status = 'published' AND published_at < now() LIMIT 5000);
    GET DIAGNOSTICS n = ROW_COUNT;
    COMMIT;
    EXIT WHEN n = 0;
  END LOOP;
END $$;
