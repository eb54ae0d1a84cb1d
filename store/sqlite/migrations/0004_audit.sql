-- The audit log's events (docs/design.md, "Audit log"). They replace the
-- history table: a transition's history row is its audit event, written by
-- the engine in the statement that makes it (so every write path records
-- it, at the cost of one row per transition, as before). Events outlive
-- the operations they tell of: purging an operation keeps them. seq, a
-- position in the tenant's log, is set when an event is sealed.
CREATE TABLE idem_audit_events (
    id              INTEGER PRIMARY KEY,
    tenant          TEXT NOT NULL,
    seq             INTEGER,
    at              INTEGER NOT NULL,
    kind            TEXT NOT NULL,
    operation_id    TEXT,
    principal       TEXT,
    run_id          TEXT,
    trace_id        TEXT,
    key             TEXT,
    fingerprint     TEXT,
    route           TEXT,
    target          TEXT,
    from_state      TEXT,
    to_state        TEXT,
    actor           TEXT,
    reason          TEXT,
    upstream_status INTEGER,
    result_ref      TEXT,
    response_sha256 TEXT
) STRICT;
CREATE INDEX idem_audit_events_op ON idem_audit_events (operation_id, id);
CREATE UNIQUE INDEX idem_audit_events_seq ON idem_audit_events (tenant, seq) WHERE seq IS NOT NULL;

-- The history so far becomes the log's first events.
INSERT INTO idem_audit_events (tenant, at, kind, operation_id, key, fingerprint, route, from_state, to_state,
    actor, reason, upstream_status, result_ref)
SELECT o.tenant, t.at,
    CASE
        WHEN t.to_state = 'executing' THEN 'forwarded'
        WHEN t.from_state IS NULL AND o.approval_id IS NOT NULL THEN 'approval_requested'
        WHEN t.from_state IS NULL THEN 'received'
        WHEN t.from_state = 'unknown' THEN 'resolved'
        WHEN t.from_state = 'prepared' AND t.to_state = 'failed' THEN 'denied'
        WHEN t.to_state = 'prepared' THEN 'released'
        ELSE t.to_state
    END,
    o.id, o.key, o.fingerprint, o.route, t.from_state, t.to_state, t.actor, t.reason, NULL, NULL
FROM idem_transitions t JOIN idem_operations o ON o.id = t.op_id ORDER BY t.at, t.op_id, t.seq;

DROP TRIGGER idem_operations_reserved;
DROP TRIGGER idem_operations_moved;
DROP TRIGGER idem_operations_purged;
DROP TABLE idem_transitions;

CREATE TRIGGER idem_operations_reserved AFTER INSERT ON idem_operations
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, key, fingerprint, route, from_state, to_state,
        actor, reason)
    VALUES (NEW.tenant, NEW.updated_at,
        CASE WHEN NEW.state = 'executing' THEN 'forwarded'
             WHEN NEW.approval_id IS NOT NULL THEN 'approval_requested' ELSE 'received' END,
        NEW.id, NEW.key, NEW.fingerprint, NEW.route, NULL, NEW.state, NEW.last_actor, NEW.last_reason);
END;

CREATE TRIGGER idem_operations_moved AFTER UPDATE OF state ON idem_operations
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, key, fingerprint, route, from_state, to_state,
        actor, reason, upstream_status, result_ref)
    VALUES (NEW.tenant, NEW.updated_at,
        CASE
            WHEN NEW.state = 'executing' THEN 'forwarded'
            WHEN OLD.state = 'unknown' THEN 'resolved'
            WHEN OLD.state = 'prepared' AND NEW.state = 'failed' THEN 'denied'
            WHEN NEW.state = 'prepared' THEN 'released'
            ELSE NEW.state
        END,
        NEW.id, NEW.key, NEW.fingerprint, NEW.route, OLD.state, NEW.state, NEW.last_actor, NEW.last_reason,
        CASE WHEN NEW.state IN ('succeeded', 'failed') THEN NEW.response_status END, NEW.result_ref);
END;

-- An approval granted or expired is an event of its operation's story.
CREATE TRIGGER idem_approvals_audited AFTER UPDATE OF status ON idem_approvals
    WHEN NEW.status IN ('approved', 'expired') AND OLD.status <> NEW.status
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, key, fingerprint, route, target,
        actor, reason)
    VALUES (NEW.tenant, CAST(unixepoch('subsec') * 1000000 AS INTEGER),
        CASE NEW.status WHEN 'approved' THEN 'approved' ELSE 'approval_expired' END, NEW.op_id, NEW.requested_by,
        NEW.key, NEW.fingerprint, NEW.route, NEW.target,
        CASE NEW.status WHEN 'approved' THEN NEW.decided_by ELSE 'idemgate:approval-expiry' END,
        'approval ' || NEW.id || ' ' || NEW.status);
END;
