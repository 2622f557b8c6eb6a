-- An AWS destination may name a role in the customer's account (issue 42):
-- the worker assumes it (`sts:AssumeRole`, the tenant's id as `ExternalId`)
-- and sends with its credentials; without one it sends as RelayOps itself.
-- Only AWS destinations have a role.
ALTER TABLE relayops.webhook_endpoints
    ADD COLUMN aws_role_arn text,
    ADD CONSTRAINT webhook_endpoints_role_for_aws CHECK (aws_role_arn IS NULL OR destination <> 'webhook');
