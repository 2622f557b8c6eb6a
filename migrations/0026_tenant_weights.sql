-- A tenant's weight (SPEC §12; issue 51): among tenants whose deliveries wait
-- for a worker's slots, each gets slots in proportion to its weight. Set by
-- the platform operator (`PUT /admin/v1/tenants/{id}/weight`); 1 for all
-- until then. Workers read the weights that are not 1, every few seconds.
ALTER TABLE relayops.tenants
    ADD COLUMN weight smallint NOT NULL DEFAULT 1 CONSTRAINT tenants_weight_range CHECK (weight BETWEEN 1 AND 100);
CREATE INDEX tenants_weighted_idx ON relayops.tenants (id) INCLUDE (weight) WHERE weight <> 1;
