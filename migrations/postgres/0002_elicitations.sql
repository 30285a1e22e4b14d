-- URL-mode elicitations, the OAuth flows that answer them, and the connections they produce.
CREATE TABLE elicitations (
    id            TEXT PRIMARY KEY,              -- UUIDv7
    principal     TEXT NOT NULL,
    session_id    TEXT NOT NULL,                 -- the session that asked; completion goes there
    requirement   TEXT NOT NULL,                 -- canonical form, e.g. "github:read:user repo"
    status        TEXT NOT NULL CHECK (status IN ('pending', 'completed', 'declined', 'expired', 'failed')),
    message       TEXT NOT NULL,
    url           TEXT NOT NULL,
    client_name   TEXT NOT NULL,
    -- A decline is reported to one retried call, then the next call elicits afresh.
    reported      BOOLEAN NOT NULL DEFAULT FALSE,
    created_at    TIMESTAMPTZ NOT NULL,
    expires_at    TIMESTAMPTZ NOT NULL,
    completed_at  TIMESTAMPTZ
);

-- At most one pending elicitation per principal, session and requirement, even under races.
CREATE UNIQUE INDEX elicitations_one_pending ON elicitations (principal, session_id, requirement) WHERE status = 'pending';
CREATE INDEX elicitations_pending_expiry ON elicitations (expires_at) WHERE status = 'pending';

CREATE TABLE oauth_flows (
    state_hash      TEXT PRIMARY KEY,            -- SHA-256 of the state; the state itself is never stored
    elicitation_id  TEXT NOT NULL REFERENCES elicitations (id) ON DELETE CASCADE,
    principal       TEXT NOT NULL,
    provider        TEXT NOT NULL,
    scopes          TEXT NOT NULL,               -- space-separated, as asked
    pkce_verifier   BYTEA NOT NULL,              -- encrypted with the key ring
    browser_hash    TEXT NOT NULL,               -- SHA-256 of the flow cookie binding the browser
    created_at      TIMESTAMPTZ NOT NULL,
    expires_at      TIMESTAMPTZ NOT NULL,
    used_at         TIMESTAMPTZ
);

CREATE INDEX oauth_flows_expiry ON oauth_flows (expires_at);

CREATE TABLE connections (
    principal       TEXT NOT NULL,
    provider        TEXT NOT NULL,
    access_token    BYTEA NOT NULL,              -- encrypted with the key ring
    refresh_token   BYTEA,                       -- encrypted with the key ring
    expires_at      TIMESTAMPTZ,
    scopes          TEXT NOT NULL,               -- space-separated, as granted
    account_label   TEXT,
    status          TEXT NOT NULL CHECK (status IN ('active', 'broken')),
    -- One refresh at a time across replicas: whoever sets a lease in the future refreshes.
    refresh_lease   TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (principal, provider)
);
