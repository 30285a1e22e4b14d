-- Upstream MCP servers: each one's tool catalogue as last listed, kept across restarts, so
-- tools/list shows an upstream's tools before anyone connects to it.
-- Times are Unix milliseconds (UTC).
CREATE TABLE upstream_catalogues (
    upstream    TEXT PRIMARY KEY NOT NULL,       -- the upstream's configured id
    tools       TEXT NOT NULL CHECK (json_type(tools) = 'array'),  -- the tools/list answer's tools, unprefixed, JSON
    digest      TEXT NOT NULL,                   -- hex SHA-256 of the canonical JSON of tools
    listed_by   TEXT,                            -- the principal whose credentials listed it; NULL: none needed
    listed_at   INTEGER NOT NULL
) STRICT;
