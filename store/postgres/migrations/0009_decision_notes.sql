-- The approver's note is part of the decision the audit log records
-- (docs/design.md, "Audit log"): the approved event's reason carries it,
-- as the denied event's does (its reason is the denial's history line,
-- written by the decision step with the note).
CREATE OR REPLACE FUNCTION idem_audit_approval() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, key, fingerprint,
        route, target, actor, reason)
    SELECT NEW.tenant, now(), CASE NEW.status WHEN 'approved' THEN 'approved' ELSE 'approval_expired' END,
        NEW.op_id, NEW.requested_by, o.run_id, o.trace_id, NEW.key, NEW.fingerprint, NEW.route, NEW.target,
        CASE NEW.status WHEN 'approved' THEN NEW.decided_by ELSE 'idemgate:approval-expiry' END,
        'approval ' || NEW.id || ' ' || NEW.status ||
            CASE WHEN NEW.status = 'approved' AND NEW.note <> '' THEN ': ' || NEW.note ELSE '' END
    FROM (SELECT 1) one LEFT JOIN idem_operations o ON o.id = NEW.op_id;
    RETURN NULL;
END $$;
