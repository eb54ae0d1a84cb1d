-- The headers of the request an approval asks about (issue 24, 7.7): what
-- the approver is shown, and what the approved execution sends. JSON of
-- name → values; NULL for none.
ALTER TABLE idem_approvals ADD COLUMN headers text;
