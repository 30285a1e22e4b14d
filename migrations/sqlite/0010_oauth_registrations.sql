-- Clients gatehouse registered (RFC 7591) at remote MCP servers' authorization servers: one per
-- authorization server and redirect URI, shared by replicas, reused across restarts.
-- Times are Unix milliseconds (UTC).
CREATE TABLE oauth_registrations (
    issuer          TEXT NOT NULL,               -- the authorization server's issuer
    redirect_uri    TEXT NOT NULL,               -- gatehouse's callback it was registered with
    client_id       TEXT NOT NULL,
    client_secret   BLOB,                        -- encrypted with the key ring; NULL: a public client
    auth_method     TEXT NOT NULL CHECK (auth_method IN ('client_secret_basic', 'client_secret_post', 'none')),
    registered_at   INTEGER NOT NULL,
    PRIMARY KEY (issuer, redirect_uri)
) STRICT;
