-- The sealer of a single-writer store needs no index of unsealed events:
-- the writer assigns ids in commit order, so every event up to the last
-- one sealed is sealed, and the unsealed are those past that watermark.
-- Dropping the partial index saves two index writes per event (its insert
-- and, at sealing, its removal) on the path of every request.
DROP INDEX idem_audit_events_unsealed;
CREATE TABLE idem_audit_sealer (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    last_id INTEGER NOT NULL
) STRICT;
INSERT INTO idem_audit_sealer (one, last_id) VALUES (1, coalesce(
    (SELECT min(id) - 1 FROM idem_audit_events WHERE seq IS NULL),
    (SELECT max(id) FROM idem_audit_events), 0));
