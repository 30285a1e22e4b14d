-- Hosted web forms: values a principal keeps per form, and answers kept for one tool call.

-- Call-scoped forms ask once per tool call: the call's key (a hash of the tool name and its
-- arguments) tells their elicitations apart. NULL for every other elicitation; never empty, since
-- the uniqueness index below reads NULL as ''.
ALTER TABLE elicitations ADD COLUMN call_key TEXT CHECK (call_key <> '');
-- A call-scoped form's description rendered with the call's arguments, shown on the form page.
ALTER TABLE elicitations ADD COLUMN detail TEXT;

-- At most one pending elicitation per principal, session, requirement and call; a NULL call key
-- counts as one value, so requirements without one keep the old guarantee.
DROP INDEX elicitations_one_pending;
CREATE UNIQUE INDEX elicitations_one_pending ON elicitations (principal, session_id, requirement, (COALESCE(call_key, '')))
    WHERE status = 'pending';

CREATE TABLE form_values (
    principal   TEXT NOT NULL,
    form        TEXT NOT NULL,
    fields      JSONB NOT NULL CHECK (jsonb_typeof(fields) = 'object'),  -- the non-secret fields
    secrets     BYTEA,                       -- the secret fields as one JSON object, encrypted with the key ring
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (principal, form)
);

-- Single use: the call the elicitation was asked for deletes the answer as it reads it.
CREATE TABLE form_answers (
    elicitation_id  TEXT PRIMARY KEY REFERENCES elicitations (id) ON DELETE CASCADE,
    fields          JSONB NOT NULL CHECK (jsonb_typeof(fields) = 'object'),
    secrets         BYTEA,                   -- encrypted with the key ring
    created_at      TIMESTAMPTZ NOT NULL
);
