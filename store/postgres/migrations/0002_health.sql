-- One row that readiness rewrites: a server that answers reads but cannot
-- commit a write (a read-only standby, a full disk) is not ready.
CREATE TABLE idem_health (
    id         integer PRIMARY KEY CHECK (id = 1),
    checked_at timestamptz NOT NULL
);
