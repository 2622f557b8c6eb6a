-- `relayops.patterns_matching` (0017) again, in PL/pgSQL: a loop over the
-- dots costs ~4 us a call here, where the SQL version (generate_series and
-- array_agg, never inlined) cost ~17 us, on every event ingest writes
-- (issue 18). Same result: the type itself, `*`, then `prefix.*` for each
-- dotted prefix, shortest first. (0017 is left as it was released: a
-- migration that was applied anywhere never changes.)
CREATE OR REPLACE FUNCTION relayops.patterns_matching(event_type text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    patterns text[] := ARRAY[event_type, '*'];
    at int := 0;
    step int;
BEGIN
    LOOP
        step := strpos(substr(event_type, at + 1), '.');
        EXIT WHEN step = 0;
        at := at + step;
        patterns := patterns || (left(event_type, at) || '*');
    END LOOP;
    RETURN patterns;
END
$$;
