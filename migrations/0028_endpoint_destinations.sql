-- Where an endpoint's deliveries go (issue 42): `webhook`, an HTTP POST to
-- its URL as before, or `aws_sqs`, SendMessage to the Amazon SQS queue whose
-- URL the endpoint holds. Every existing endpoint is a webhook.
ALTER TABLE relayops.webhook_endpoints
    ADD COLUMN destination text NOT NULL DEFAULT 'webhook'
        CONSTRAINT webhook_endpoints_destination_known CHECK (destination IN ('webhook', 'aws_sqs'));
