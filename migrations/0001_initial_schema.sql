-- RelayOps schema. Every business row carries tenant_id; child rows reference
-- their parent through (tenant_id, id) so the database itself refuses a
-- delivery, attempt or subscription that crosses tenants.
CREATE SCHEMA IF NOT EXISTS relayops;

-- Identity ------------------------------------------------------------------

CREATE TABLE relayops.tenants (
    id                  uuid PRIMARY KEY,
    name                text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- Ingest token bucket; NULL means the platform default.
    ingest_rate_per_sec integer CHECK (ingest_rate_per_sec > 0),
    ingest_burst        integer CHECK (ingest_burst > 0),
    created_at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE relayops.user_accounts (
    id            uuid PRIMARY KEY,
    tenant_id     uuid NOT NULL REFERENCES relayops.tenants (id) ON DELETE CASCADE,
    email         text NOT NULL CHECK (length(email) BETWEEN 3 AND 320),
    password_hash text NOT NULL,
    role          text NOT NULL DEFAULT 'admin' CHECK (role IN ('admin', 'viewer')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_login_at timestamptz,
    UNIQUE (tenant_id, id)
);
-- Emails are unique across the whole platform, case-insensitively.
CREATE UNIQUE INDEX user_accounts_email_key ON relayops.user_accounts (lower(email));

CREATE TABLE relayops.api_keys (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES relayops.tenants (id) ON DELETE CASCADE,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- The public identifier part of the key (e.g. rk_live_AbCdEf012345): shown in
    -- lists and used to find the row; the secret part is never stored.
    key_prefix   text NOT NULL,
    -- SHA-256 of the whole key; compared in constant time after the lookup.
    key_hash     bytea NOT NULL CHECK (length(key_hash) = 32),
    scopes       text[] NOT NULL CHECK (cardinality(scopes) > 0),
    created_by   uuid,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    UNIQUE (tenant_id, id),
    FOREIGN KEY (tenant_id, created_by) REFERENCES relayops.user_accounts (tenant_id, id) ON DELETE SET NULL (created_by)
);
CREATE UNIQUE INDEX api_keys_key_prefix_key ON relayops.api_keys (key_prefix);
CREATE UNIQUE INDEX api_keys_key_hash_key ON relayops.api_keys (key_hash);
CREATE INDEX api_keys_tenant_idx ON relayops.api_keys (tenant_id, created_at DESC);

-- Bootstrap tokens come from the environment; once used only their hash is kept,
-- so the same token can never create a second tenant.
CREATE TABLE relayops.used_bootstrap_tokens (
    token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    tenant_id  uuid REFERENCES relayops.tenants (id) ON DELETE SET NULL,
    used_at    timestamptz NOT NULL DEFAULT now()
);

-- Routing -------------------------------------------------------------------

CREATE TABLE relayops.webhook_endpoints (
    id                         uuid PRIMARY KEY,
    tenant_id                  uuid NOT NULL REFERENCES relayops.tenants (id) ON DELETE CASCADE,
    url                        text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    description                text NOT NULL DEFAULT '' CHECK (length(description) <= 1000),
    -- Standard Webhooks secret (whsec_ + base64). It signs every request, so it is
    -- kept recoverable; the previous secret stays valid until it expires.
    secret                     text NOT NULL,
    previous_secret            text,
    previous_secret_expires_at timestamptz,
    enabled                    boolean NOT NULL DEFAULT true,
    disabled_reason            text,
    -- Flow control: NULL means the platform default.
    rate_limit_per_sec         integer CHECK (rate_limit_per_sec > 0),
    rate_limit_burst           integer CHECK (rate_limit_burst > 0),
    max_in_flight              integer CHECK (max_in_flight > 0),
    -- Retry policy: NULL means the platform default schedule.
    max_attempts               integer CHECK (max_attempts BETWEEN 1 AND 50),
    retry_schedule_secs        integer[],
    timeout_ms                 integer CHECK (timeout_ms BETWEEN 100 AND 60000),
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, id)
);
CREATE INDEX webhook_endpoints_tenant_idx ON relayops.webhook_endpoints (tenant_id, created_at DESC, id DESC);

CREATE TABLE relayops.endpoint_subscriptions (
    id                 uuid PRIMARY KEY,
    tenant_id          uuid NOT NULL,
    endpoint_id        uuid NOT NULL,
    -- An exact event type ("order.created"), a prefix wildcard ("order.*") or "*".
    event_type_pattern text NOT NULL CHECK (length(event_type_pattern) BETWEEN 1 AND 128),
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (endpoint_id, event_type_pattern),
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES relayops.webhook_endpoints (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX endpoint_subscriptions_tenant_idx ON relayops.endpoint_subscriptions (tenant_id, endpoint_id);

-- Work ----------------------------------------------------------------------

CREATE TABLE relayops.events (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES relayops.tenants (id) ON DELETE CASCADE,
    event_type      text NOT NULL CHECK (length(event_type) BETWEEN 1 AND 128),
    payload         jsonb NOT NULL,
    idempotency_key text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    -- SHA-256 of (event type, payload): a reused idempotency key with a different
    -- request is refused instead of silently returning the wrong event.
    request_hash    bytea NOT NULL CHECK (length(request_hash) = 32),
    -- Reserved for per-key ordering lanes.
    ordering_key    text,
    received_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, idempotency_key),
    UNIQUE (tenant_id, id)
);
CREATE INDEX events_tenant_received_idx ON relayops.events (tenant_id, received_at DESC, id DESC);
CREATE INDEX events_tenant_type_received_idx ON relayops.events (tenant_id, event_type, received_at DESC);

CREATE TABLE relayops.deliveries (
    id               uuid PRIMARY KEY,
    tenant_id        uuid NOT NULL,
    event_id         uuid NOT NULL,
    endpoint_id      uuid NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'in_progress', 'scheduled', 'delivered', 'failed', 'dead')),
    attempt_count    integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    -- When a scheduled retry is due.
    next_attempt_at  timestamptz,
    -- The worker lease: who is sending it and until when the claim holds.
    lease_owner      text,
    lease_expires_at timestamptz,
    last_http_status integer,
    last_error       text,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, endpoint_id),
    UNIQUE (tenant_id, id),
    FOREIGN KEY (tenant_id, event_id) REFERENCES relayops.events (tenant_id, id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES relayops.webhook_endpoints (tenant_id, id) ON DELETE CASCADE,
    CHECK ((status = 'in_progress') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);
-- Claim and recovery paths: partial indexes stay as small as the work they find.
CREATE INDEX deliveries_expired_lease_idx ON relayops.deliveries (lease_expires_at) WHERE status = 'in_progress';
CREATE INDEX deliveries_due_retry_idx ON relayops.deliveries (next_attempt_at) WHERE status = 'scheduled';
CREATE INDEX deliveries_pending_idx ON relayops.deliveries (created_at) WHERE status = 'pending';
-- Operator lists.
CREATE INDEX deliveries_tenant_status_idx ON relayops.deliveries (tenant_id, status, created_at DESC, id DESC);
CREATE INDEX deliveries_endpoint_status_idx ON relayops.deliveries (tenant_id, endpoint_id, status, created_at DESC, id DESC);
CREATE INDEX deliveries_event_idx ON relayops.deliveries (tenant_id, event_id);

-- Immutable: one row per HTTP attempt; numbers keep rising across replays.
CREATE TABLE relayops.delivery_attempts (
    id               uuid PRIMARY KEY,
    tenant_id        uuid NOT NULL,
    delivery_id      uuid NOT NULL,
    attempt_number   integer NOT NULL CHECK (attempt_number > 0),
    outcome          text NOT NULL CHECK (outcome IN ('delivered', 'retry', 'failed', 'dead')),
    http_status      integer,
    error            text,
    request_headers  jsonb NOT NULL DEFAULT '{}'::jsonb,
    response_headers jsonb,
    response_body    text,
    latency_ms       integer NOT NULL CHECK (latency_ms >= 0),
    worker_id        text NOT NULL,
    started_at       timestamptz NOT NULL,
    finished_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (delivery_id, attempt_number),
    FOREIGN KEY (tenant_id, delivery_id) REFERENCES relayops.deliveries (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX delivery_attempts_tenant_idx ON relayops.delivery_attempts (tenant_id, delivery_id, attempt_number);

-- The only bridge from the database to the broker.
CREATE TABLE relayops.outbox_messages (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id        uuid NOT NULL REFERENCES relayops.tenants (id) ON DELETE CASCADE,
    delivery_id      uuid,
    envelope         jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'claimed', 'published')),
    available_at     timestamptz NOT NULL DEFAULT now(),
    claimed_by       text,
    claim_expires_at timestamptz,
    publish_attempts integer NOT NULL DEFAULT 0,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    published_at     timestamptz,
    FOREIGN KEY (tenant_id, delivery_id) REFERENCES relayops.deliveries (tenant_id, id) ON DELETE CASCADE,
    CHECK ((status = 'claimed') = (claimed_by IS NOT NULL AND claim_expires_at IS NOT NULL))
);
CREATE INDEX outbox_messages_pending_idx ON relayops.outbox_messages (id) WHERE status = 'pending';
CREATE INDEX outbox_messages_claimed_idx ON relayops.outbox_messages (claim_expires_at) WHERE status = 'claimed';
CREATE INDEX outbox_messages_published_idx ON relayops.outbox_messages (published_at) WHERE status = 'published';
CREATE INDEX outbox_messages_delivery_idx ON relayops.outbox_messages (delivery_id);
