-- One row that readiness rewrites: a store that answers reads but cannot
-- commit a write (a full disk, a read-only file) is not ready.
CREATE TABLE idem_health (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    checked_at INTEGER NOT NULL
) STRICT;
