-- A tenant may keep its history for less than the platform's retention
-- (RELAYOPS_RETENTION_DAYS); its older terminal rows are deleted in bounded
-- batches by the history maintenance (shared::repo::retention). NULL means
-- the platform's.
ALTER TABLE relayops.tenants ADD COLUMN retention_days integer CHECK (retention_days > 0);

-- Who runs the history maintenance (db::partitions) now: a lease row, not a
-- session advisory lock, so it holds through transaction-mode poolers
-- (pgbouncer, RDS Proxy), where consecutive statements may run on different
-- server connections.
CREATE TABLE relayops.maintenance_leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);
