-- MCP sessions and the per-session event log that backs the standalone SSE stream.
CREATE TABLE sessions (
    id                  TEXT PRIMARY KEY,
    principal           TEXT NOT NULL,
    protocol_version    TEXT NOT NULL,
    client_info         JSONB NOT NULL,
    client_capabilities JSONB NOT NULL,
    log_level           TEXT,
    -- Sequence number of the newest event; events are numbered per session from 1.
    last_event_seq      BIGINT NOT NULL DEFAULT 0,
    -- Newest event written to a stream, where a stream opened without Last-Event-ID resumes.
    delivered_seq       BIGINT NOT NULL DEFAULT 0,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX sessions_last_seen_at ON sessions (last_seen_at);

CREATE TABLE session_events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    message    JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);
