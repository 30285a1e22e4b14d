-- Browser sessions of the pages in `oauth` identity mode: a browser that signed in with OpenID
-- Connect holds an opaque cookie; the row, shared by replicas, says who it is until it expires.
CREATE TABLE browser_sessions (
    id          TEXT PRIMARY KEY,                -- hex SHA-256 of the cookie's value, never the value
    principal   TEXT NOT NULL,
    claims      JSONB NOT NULL CHECK (jsonb_typeof(claims) = 'object'),  -- the id_token's string claims
    created_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
-- A principal's sessions, oldest first (the oldest ends when the cap is reached), and the sweep.
CREATE INDEX browser_sessions_principal ON browser_sessions (principal, created_at);
CREATE INDEX browser_sessions_expiry ON browser_sessions (expires_at);
