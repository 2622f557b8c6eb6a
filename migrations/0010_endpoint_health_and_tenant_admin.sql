-- Endpoint health, operational endpoints, and tenant suspension (issue 16).

-- What an endpoint receives: the tenant's own events ('webhook'), or the
-- platform's operational events about the tenant's other endpoints
-- ('operational': endpoint.disabled, endpoint.enabled, delivery.dead).
ALTER TABLE relayops.webhook_endpoints
    ADD COLUMN kind text NOT NULL DEFAULT 'webhook' CHECK (kind IN ('webhook', 'operational')),
    -- Health, written only when it changes (see repo::endpoint_health): the
    -- first failure after a success sets failing_since, a success clears it;
    -- the last_* times are kept to within a minute.
    ADD COLUMN failing_since   timestamptz,
    ADD COLUMN last_success_at timestamptz,
    ADD COLUMN last_failure_at timestamptz;

-- A suspended tenant's ingest is refused (403); accepted work is delivered.
ALTER TABLE relayops.tenants
    ADD COLUMN suspended_at     timestamptz,
    ADD COLUMN suspended_reason text CHECK (length(suspended_reason) <= 1000);
