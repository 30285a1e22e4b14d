-- Upstream MCP servers: each one's tool catalogue as last listed, shared by replicas and kept
-- across restarts, so tools/list shows an upstream's tools before anyone connects to it.
CREATE TABLE upstream_catalogues (
    upstream    TEXT PRIMARY KEY,                -- the upstream's configured id
    tools       JSONB NOT NULL CHECK (jsonb_typeof(tools) = 'array'),  -- the tools/list answer's tools, unprefixed
    digest      TEXT NOT NULL,                   -- hex SHA-256 of the canonical JSON of tools
    listed_by   TEXT,                            -- the principal whose credentials listed it; NULL: none needed
    listed_at   TIMESTAMPTZ NOT NULL
);
