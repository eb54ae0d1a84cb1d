-- Approvals: one row per human decision asked for. An operation that waits
-- for one carries its id, status and expiry (approval_* columns) so that a
-- retry, an acquire and the concurrency index read one row; this table
-- keeps the whole record, and the approvals an operation had before. Every
-- step that changes an approval changes both, in one statement.
CREATE TABLE idem_approvals (
    id           text PRIMARY KEY,
    op_id        text NOT NULL,
    tenant       text NOT NULL,
    key          text NOT NULL,
    route        text NOT NULL,
    target       text NOT NULL,
    fingerprint  text NOT NULL,
    summary      text NOT NULL,
    command      text NOT NULL,
    reversible   boolean NOT NULL,
    requested_by text NOT NULL,
    approvers    text[] NOT NULL,
    status       text NOT NULL
        CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'used')),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,     -- pending: decided by; approved: used by
    valid_for_us bigint NOT NULL,
    decided_by   text,
    decided_at   timestamptz,
    note         text NOT NULL DEFAULT ''
);

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
