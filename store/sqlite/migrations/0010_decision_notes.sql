-- The approver's note is part of the decision the audit log records
-- (docs/design.md, "Audit log"): the approved event's reason carries it,
-- as the denied event's does (its reason is the denial's history line,
-- written by the decision step with the note).
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
        'approval ' || NEW.id || ' ' || NEW.status ||
            CASE WHEN NEW.status = 'approved' AND NEW.note <> '' THEN ': ' || NEW.note ELSE '' END);
END;
