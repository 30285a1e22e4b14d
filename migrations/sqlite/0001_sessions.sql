-- MCP sessions and the per-session event log that backs the standalone SSE stream.
-- Times are Unix milliseconds (UTC).
CREATE TABLE sessions (
    id                  TEXT PRIMARY KEY NOT NULL,
    principal           TEXT NOT NULL,
    protocol_version    TEXT NOT NULL,
    client_info         TEXT NOT NULL,
    client_capabilities TEXT NOT NULL,
    log_level           TEXT,
    -- Sequence number of the newest event; events are numbered per session from 1.
    last_event_seq      INTEGER NOT NULL DEFAULT 0,
    -- Newest event written to a stream, where a stream opened without Last-Event-ID resumes.
    delivered_seq       INTEGER NOT NULL DEFAULT 0,
    created_at          INTEGER NOT NULL,
    last_seen_at        INTEGER NOT NULL
) STRICT;

CREATE INDEX sessions_last_seen_at ON sessions (last_seen_at);

CREATE TABLE session_events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    message    TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
) STRICT;
