-- Approvals: one row per human decision asked for. An operation that waits
-- for one carries its id, status and expiry (approval_* columns) so that a
-- retry, an acquire and the concurrency index read one row; this table
-- keeps the whole record, and the approvals an operation had before.
CREATE TABLE idem_approvals (
    id           TEXT PRIMARY KEY,
    op_id        TEXT NOT NULL,
    tenant       TEXT NOT NULL,
    key          TEXT NOT NULL,
    route        TEXT NOT NULL,
    target       TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    summary      TEXT NOT NULL,
    command      TEXT NOT NULL,
    reversible   INTEGER NOT NULL,
    requested_by TEXT NOT NULL,
    approvers    TEXT NOT NULL,            -- JSON array of role names
    status       TEXT NOT NULL
        CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'used')),
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,         -- pending: decided by; approved: used by
    valid_for_us INTEGER NOT NULL,
    decided_by   TEXT,
    decided_at   INTEGER,
    note         TEXT NOT NULL DEFAULT ''
) STRICT, WITHOUT ROWID;

CREATE INDEX idem_approvals_op ON idem_approvals (op_id);
-- The inbox: a tenant's approvals by status, in creation order.
CREATE INDEX idem_approvals_tenant ON idem_approvals (tenant, status, id);
-- The expiry sweep reads only approvals that can still expire.
CREATE INDEX idem_approvals_due ON idem_approvals (expires_at) WHERE status IN ('pending', 'approved');

-- An approved operation not yet executed holds its concurrency group, as a
-- pending one does: the approver consented to the environment as it was.
DROP INDEX idem_operations_concurrency;
CREATE UNIQUE INDEX idem_operations_concurrency ON idem_operations (tenant, route, concurrency_key)
    WHERE concurrency_key IS NOT NULL
      AND (state IN ('executing', 'unknown')
           OR (state = 'prepared' AND approval_status IN ('pending', 'approved')));

-- An approval granted or expired is reflected on its operation, when it is
-- still the operation's current one, in the statement that changed it.
CREATE TRIGGER idem_approvals_moved AFTER UPDATE OF status ON idem_approvals
    WHEN NEW.status IN ('approved', 'expired')
BEGIN
    UPDATE idem_operations SET approval_status = NEW.status, approval_expires_at = NEW.expires_at
    WHERE id = NEW.op_id AND approval_id = NEW.id AND approval_status IN ('pending', 'approved');
END;

-- An acquire marks the operation's approval used: the approval follows, in
-- the same statement.
CREATE TRIGGER idem_operations_approval_used AFTER UPDATE OF approval_status ON idem_operations
    WHEN NEW.approval_status = 'used' AND OLD.approval_status = 'approved'
BEGIN
    UPDATE idem_approvals SET status = 'used' WHERE id = NEW.approval_id AND status = 'approved';
END;

CREATE TRIGGER idem_operations_purged_approvals AFTER DELETE ON idem_operations
BEGIN
    DELETE FROM idem_approvals WHERE op_id = OLD.id;
END;
