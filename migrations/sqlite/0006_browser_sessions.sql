-- Browser sessions of the pages in `oauth` identity mode: a browser that signed in with OpenID
-- Connect holds an opaque cookie; the row says who it is until it expires.
-- Times are Unix milliseconds (UTC).
CREATE TABLE browser_sessions (
    id          TEXT PRIMARY KEY NOT NULL,       -- hex SHA-256 of the cookie's value, never the value
    principal   TEXT NOT NULL,
    claims      TEXT NOT NULL CHECK (json_type(claims) = 'object'),  -- the id_token's string claims, JSON
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT;
-- A principal's sessions, oldest first (the oldest ends when the cap is reached), and the sweep.
CREATE INDEX browser_sessions_principal ON browser_sessions (principal, created_at);
CREATE INDEX browser_sessions_expiry ON browser_sessions (expires_at);
