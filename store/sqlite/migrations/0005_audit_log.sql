-- The audit log proper (docs/design.md, "Audit log"): the context every event
-- carries, the tree's hashes, and the signed checkpoints.

-- The request's context, kept on the operation so that the engine's
-- triggers can write it into every event of the operation's story.
ALTER TABLE idem_operations ADD COLUMN principal TEXT;
ALTER TABLE idem_operations ADD COLUMN target TEXT;
ALTER TABLE idem_operations ADD COLUMN run_id TEXT;
ALTER TABLE idem_operations ADD COLUMN trace_id TEXT;
ALTER TABLE idem_operations ADD COLUMN response_sha256 TEXT;

-- hashes are the tree hashes stored with this leaf (tlog's layout: the
-- leaf's, then one per perfect subtree it completes; two on average),
-- concatenated, set with seq when the event is sealed.
ALTER TABLE idem_audit_events ADD COLUMN hashes BLOB;
CREATE INDEX idem_audit_events_unsealed ON idem_audit_events (id) WHERE seq IS NULL;

-- One log per tenant: its size, and its latest checkpoint's.
CREATE TABLE idem_audit_heads (
    tenant          TEXT PRIMARY KEY,
    size            INTEGER NOT NULL,
    checkpoint_size INTEGER NOT NULL DEFAULT 0,
    checkpoint_at   INTEGER NOT NULL DEFAULT 0
) STRICT;

-- Signed checkpoints. The primary key is the promise that the log never
-- signs two roots for one size.
CREATE TABLE idem_audit_checkpoints (
    tenant TEXT NOT NULL,
    size   INTEGER NOT NULL,
    root   BLOB NOT NULL,
    signed TEXT NOT NULL,
    at     INTEGER NOT NULL,
    PRIMARY KEY (tenant, size)
) STRICT;

DROP TRIGGER idem_operations_reserved;
DROP TRIGGER idem_operations_moved;

CREATE TRIGGER idem_operations_reserved AFTER INSERT ON idem_operations
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, key, fingerprint,
        route, target, from_state, to_state, actor, reason)
    VALUES (NEW.tenant, NEW.updated_at,
        CASE WHEN NEW.state = 'executing' THEN 'forwarded'
             WHEN NEW.approval_id IS NOT NULL THEN 'approval_requested' ELSE 'received' END,
        NEW.id, NEW.principal, NEW.run_id, NEW.trace_id, NEW.key, NEW.fingerprint, NEW.route, NEW.target,
        NULL, NEW.state, NEW.last_actor, NEW.last_reason);
END;

CREATE TRIGGER idem_operations_moved AFTER UPDATE OF state ON idem_operations
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, key, fingerprint,
        route, target, from_state, to_state, actor, reason, upstream_status, result_ref, response_sha256)
    VALUES (NEW.tenant, NEW.updated_at,
        CASE
            WHEN NEW.state = 'executing' THEN 'forwarded'
            WHEN OLD.state = 'unknown' THEN 'resolved'
            WHEN OLD.state = 'prepared' AND NEW.state = 'failed' THEN 'denied'
            WHEN NEW.state = 'prepared' THEN 'released'
            ELSE NEW.state
        END,
        NEW.id, NEW.principal, NEW.run_id, NEW.trace_id, NEW.key, NEW.fingerprint, NEW.route, NEW.target,
        OLD.state, NEW.state, NEW.last_actor, NEW.last_reason,
        CASE WHEN NEW.state IN ('succeeded', 'failed') THEN NEW.response_status END, NEW.result_ref,
        CASE WHEN NEW.state IN ('succeeded', 'failed') THEN NEW.response_sha256 END);
END;

DROP TRIGGER idem_approvals_audited;
CREATE TRIGGER idem_approvals_audited AFTER UPDATE OF status ON idem_approvals
    WHEN NEW.status IN ('approved', 'expired') AND OLD.status <> NEW.status
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, key, fingerprint,
        route, target, actor, reason)
    VALUES (NEW.tenant, CAST(unixepoch('subsec') * 1000000 AS INTEGER),
        CASE NEW.status WHEN 'approved' THEN 'approved' ELSE 'approval_expired' END, NEW.op_id, NEW.requested_by,
        (SELECT run_id FROM idem_operations WHERE id = NEW.op_id),
        (SELECT trace_id FROM idem_operations WHERE id = NEW.op_id),
        NEW.key, NEW.fingerprint, NEW.route, NEW.target,
        CASE NEW.status WHEN 'approved' THEN NEW.decided_by ELSE 'idemgate:approval-expiry' END,
        'approval ' || NEW.id || ' ' || NEW.status);
END;
