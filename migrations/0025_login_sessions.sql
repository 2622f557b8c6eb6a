-- Login sessions kept server-side (console sign-in and API login tokens):
-- a login token names its session, and a request is let in only while the
-- session is live — not revoked (sign-out, "sign out everywhere"), used
-- within the idle timeout, and younger than its absolute lifetime. So a
-- copied token or cookie stops working the moment its session ends, on
-- every replica, rather than when the token expires.
CREATE TABLE relayops.login_sessions (
    id            uuid PRIMARY KEY,
    tenant_id     uuid NOT NULL,
    user_id       uuid NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    -- Moved on by requests, at most once a minute (`repo::login_sessions`).
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    revoked_at    timestamptz,
    FOREIGN KEY (tenant_id, user_id) REFERENCES relayops.user_accounts (tenant_id, id) ON DELETE CASCADE
);
-- A user's sessions: "sign out everywhere" ends the live ones, and each
-- login deletes the user's sessions that ended more than a day before.
CREATE INDEX login_sessions_user_idx ON relayops.login_sessions (tenant_id, user_id);
