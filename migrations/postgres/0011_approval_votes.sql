-- Approvers' votes on approval requests (elicitations asking for `approval:ID`): one per approver
-- and request; a request is decided when enough approved or one denied.
CREATE TABLE approval_votes (
    elicitation_id  TEXT NOT NULL REFERENCES elicitations(id) ON DELETE CASCADE,
    approver        TEXT NOT NULL,               -- the approver's principal
    approve         BOOLEAN NOT NULL,
    reason          TEXT NOT NULL,               -- what the approver wrote; '' for nothing
    decided_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (elicitation_id, approver)
);
