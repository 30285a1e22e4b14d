-- An approval request is bound to the caller and the exact call, not to the session that asked
-- (issue 40): a retry after the client restarted, its session was reaped or it reached another
-- replica finds the request, and its decision, by the binding. `call_arguments` holds the call's
-- full arguments as JSON sealed with the key ring (the tool runs from them once approved); the
-- call key is the SHA-256 of the tool and arguments in RFC 8785 (JCS) form. `oauth_client` is the
-- caller's OAuth client in `oauth` mode. Both NULL for every elicitation bound to its session.
ALTER TABLE elicitations ADD COLUMN oauth_client TEXT;
ALTER TABLE elicitations ADD COLUMN call_arguments BLOB;
-- A caller-bound ask is looked up without its session.
CREATE INDEX elicitations_bound_ask ON elicitations (principal, requirement, call_key)
    WHERE call_arguments IS NOT NULL;
