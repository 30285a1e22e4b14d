-- An ask's elicitations whatever their status: every gated call looks for an ended one that no
-- call has reported yet (a decline, an expiry), and without this index that read the whole table.
CREATE INDEX elicitations_ask ON elicitations (principal, session_id, requirement);
