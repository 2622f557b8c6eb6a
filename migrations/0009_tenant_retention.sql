-- A tenant may keep its history for less than the platform's retention
-- (RELAYOPS_RETENTION_DAYS); its older terminal rows are deleted in bounded
-- batches by the history maintenance (shared::repo::retention). NULL means
-- the platform's.
ALTER TABLE relayops.tenants ADD COLUMN retention_days integer CHECK (retention_days > 0);
