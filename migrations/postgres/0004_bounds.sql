-- Per-principal bounds: a principal's sessions by recency (the least recently used one ends when
-- the cap is reached), a principal's pending elicitations (capped), and ended elicitations by when
-- they ended (deleted after the retention period).
CREATE INDEX sessions_principal_last_seen ON sessions (principal, last_seen_at);
CREATE INDEX elicitations_pending_principal ON elicitations (principal) WHERE status = 'pending';
CREATE INDEX elicitations_ended ON elicitations ((COALESCE(completed_at, expires_at))) WHERE status <> 'pending';
