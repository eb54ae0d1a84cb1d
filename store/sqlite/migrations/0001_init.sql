-- The operations registry. (tenant, key) is the identity of an intended
-- action; its unique constraint is what makes reservation atomic. Times are
-- Unix microseconds.
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
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    expires_at          INTEGER NOT NULL,
    UNIQUE (tenant, key),
    CHECK ((state = 'executing') = (lease_until IS NOT NULL))
) STRICT;

CREATE INDEX idem_operations_lease_due ON idem_operations (lease_until)
    WHERE state = 'executing';
CREATE INDEX idem_operations_purge_due ON idem_operations (expires_at)
    WHERE state IN ('prepared', 'succeeded', 'failed');
CREATE INDEX idem_operations_list ON idem_operations (tenant, state, id);

CREATE TABLE idem_transitions (
    seq        INTEGER PRIMARY KEY,
    op_id      TEXT NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    at         INTEGER NOT NULL,
    actor      TEXT NOT NULL,
    reason     TEXT NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX idem_transitions_op ON idem_transitions (op_id, seq);
