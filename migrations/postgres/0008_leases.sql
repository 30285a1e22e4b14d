-- Leases: background work that must run on one replica at a time (the retention sweep) is done
-- by whoever holds its lease. A lease is taken when it is free or has run out, in one statement.
CREATE TABLE leases (
    name        TEXT PRIMARY KEY,                -- what the lease is for, e.g. "retention"
    holder      TEXT NOT NULL,                   -- a random id drawn by each process at start
    held_until  TIMESTAMPTZ NOT NULL
);

-- The retention sweep finds old events by when they were appended.
CREATE INDEX session_events_created_at ON session_events (created_at);
