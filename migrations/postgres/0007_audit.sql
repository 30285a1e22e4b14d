-- The audit trail: append-only, one row per thing that happened to a principal's access (a
-- connection, form values, an elicitation, a gated call, an operator's admin action). No secret is
-- ever written here: no token, form value, code or state.
CREATE TABLE audit (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at              TIMESTAMPTZ NOT NULL,
    principal       TEXT NOT NULL,
    action          TEXT NOT NULL,                   -- a fixed set (AuditAction), e.g. connection.created
    subject         TEXT NOT NULL,                   -- provider, form id, elicitation id, tool or upstream
    client_address  TEXT,                            -- after trusted proxies
    client_name     TEXT,                            -- the MCP client's clientInfo
    detail          JSONB NOT NULL CHECK (jsonb_typeof(detail) = 'object')  -- small, bounded, never a secret
);
-- A principal's trail, newest first; everyone's since a time.
CREATE INDEX audit_principal_at ON audit (principal, at);
CREATE INDEX audit_at ON audit (at);
