-- The audit log's events (docs/design.md, "Audit log"). They replace the
-- history table: a transition's history row is its audit event, written in
-- the statement that makes the transition (as the history row was: one row
-- per transition, as before). Events outlive the operations they tell of:
-- purging an operation keeps them. seq, a position in the tenant's log, is
-- set when an event is sealed.
CREATE TABLE idem_audit_events (
    id              bigserial PRIMARY KEY,
    tenant          text NOT NULL,
    seq             bigint,
    at              timestamptz NOT NULL,
    kind            text NOT NULL,
    operation_id    text,
    principal       text,
    run_id          text,
    trace_id        text,
    key             text,
    fingerprint     text,
    route           text,
    target          text,
    from_state      text,
    to_state        text,
    actor           text,
    reason          text,
    upstream_status integer,
    result_ref      text,
    response_sha256 text
);
CREATE INDEX idem_audit_events_op ON idem_audit_events (operation_id, id);
CREATE INDEX idem_audit_events_unsealed ON idem_audit_events (id) WHERE seq IS NULL;
CREATE UNIQUE INDEX idem_audit_events_seq ON idem_audit_events (tenant, seq) WHERE seq IS NOT NULL;

-- The history so far becomes the log's first events.
INSERT INTO idem_audit_events (tenant, at, kind, operation_id, key, fingerprint, route, from_state, to_state,
    actor, reason)
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
    o.id, o.key, o.fingerprint, o.route, t.from_state, t.to_state, t.actor, t.reason
FROM idem_transitions t JOIN idem_operations o ON o.id = t.op_id ORDER BY t.seq;
DROP TABLE idem_transitions;

-- An approval granted or expired is an event of its operation's story
-- (a rare path: a trigger costs nothing on the common one).
CREATE FUNCTION idem_audit_approval() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, key, fingerprint, route, target,
        actor, reason)
    VALUES (NEW.tenant, now(), CASE NEW.status WHEN 'approved' THEN 'approved' ELSE 'approval_expired' END,
        NEW.op_id, NEW.requested_by, NEW.key, NEW.fingerprint, NEW.route, NEW.target,
        CASE NEW.status WHEN 'approved' THEN NEW.decided_by ELSE 'idemgate:approval-expiry' END,
        'approval ' || NEW.id || ' ' || NEW.status);
    RETURN NULL;
END $$;
CREATE TRIGGER idem_approvals_audited AFTER UPDATE OF status ON idem_approvals
    FOR EACH ROW WHEN (NEW.status IN ('approved', 'expired') AND OLD.status <> NEW.status)
    EXECUTE FUNCTION idem_audit_approval();
