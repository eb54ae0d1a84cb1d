-- The operations registry. (tenant, key) is the identity of an intended
-- action; its unique constraint is what makes reservation atomic. Times are
-- Unix microseconds. The table is clustered by its time-ordered id (WITHOUT
-- ROWID), which spares every write the page of a separate id index: SQLite
-- writes whole pages to the WAL, so pages touched is the cost of a commit.
CREATE TABLE idem_operations (
    id                  TEXT PRIMARY KEY,
    tenant              TEXT NOT NULL,
    key                 TEXT NOT NULL,
    route               TEXT NOT NULL,
    fingerprint         TEXT NOT NULL,
    state               TEXT NOT NULL
        CHECK (state IN ('prepared', 'executing', 'succeeded', 'failed', 'unknown')),
    attempts            INTEGER NOT NULL DEFAULT 0,
    owner_token         TEXT,
    fence               INTEGER NOT NULL DEFAULT 0,
    lease_until         INTEGER,
    business_key        TEXT,
    concurrency_key     TEXT,
    approval_id         TEXT,
    approval_status     TEXT,
    approval_expires_at INTEGER,
    response_status     INTEGER,
    response_headers    BLOB,
    response_body       BLOB,
    result_ref          TEXT,
    last_error          TEXT,
    retention_us        INTEGER NOT NULL,
    last_actor          TEXT NOT NULL,   -- who made the latest transition,
    last_reason         TEXT NOT NULL,   -- and why: the triggers copy them
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    expires_at          INTEGER NOT NULL,
    UNIQUE (tenant, key),
    CHECK ((state = 'executing') = (lease_until IS NOT NULL))
) STRICT, WITHOUT ROWID;

-- The operations that are not final. One index serves the lease-expiry
-- sweep (state = 'executing' ordered by lease_until) and listing what needs
-- attention (prepared, executing, unknown); final operations, the bulk of
-- the table, stay out of it, so completing one only adds a purge entry.
-- State leads, so the planner never takes it for a (tenant, key) lookup.
CREATE INDEX idem_operations_live ON idem_operations (state, lease_until, tenant, id)
    WHERE state IN ('prepared', 'executing', 'unknown');
-- business_key: one operation per (tenant, route, value), across keys.
CREATE UNIQUE INDEX idem_operations_business ON idem_operations (tenant, route, business_key)
    WHERE business_key IS NOT NULL;
-- concurrency_key: at most one live operation per (tenant, route, value):
-- executing, unknown, or prepared awaiting an approval.
CREATE UNIQUE INDEX idem_operations_concurrency ON idem_operations (tenant, route, concurrency_key)
    WHERE concurrency_key IS NOT NULL
      AND (state IN ('executing', 'unknown') OR (state = 'prepared' AND approval_status = 'pending'));
-- The retention purge reads only purgeable operations.
CREATE INDEX idem_operations_purge_due ON idem_operations (expires_at)
    WHERE state IN ('prepared', 'succeeded', 'failed');

-- One row per transition, numbered within its operation and clustered by
-- (op_id, seq): one b-tree, read only by operation.
CREATE TABLE idem_transitions (
    op_id      TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    at         INTEGER NOT NULL,
    actor      TEXT NOT NULL,
    reason     TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (op_id, seq)
) STRICT, WITHOUT ROWID;

-- The history is written by the engine, inside the statement that makes the
-- transition: every write path records it, and a step is one statement (so
-- one autocommit and no extra round trip through the driver).
CREATE TRIGGER idem_operations_reserved AFTER INSERT ON idem_operations
BEGIN
    INSERT INTO idem_transitions (op_id, seq, from_state, to_state, at, actor, reason)
    VALUES (NEW.id, 1, NULL, NEW.state, NEW.updated_at, NEW.last_actor, NEW.last_reason);
END;

CREATE TRIGGER idem_operations_moved AFTER UPDATE OF state ON idem_operations
BEGIN
    INSERT INTO idem_transitions (op_id, seq, from_state, to_state, at, actor, reason)
    VALUES (NEW.id, (SELECT max(seq) + 1 FROM idem_transitions WHERE op_id = NEW.id),
            OLD.state, NEW.state, NEW.updated_at, NEW.last_actor, NEW.last_reason);
END;

CREATE TRIGGER idem_operations_purged AFTER DELETE ON idem_operations
BEGIN
    DELETE FROM idem_transitions WHERE op_id = OLD.id;
END;
