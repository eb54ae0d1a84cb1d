-- The audit log proper (docs/design.md, "Audit log"): the context every event
-- carries, the tree's hashes, and the signed checkpoints.

-- The request's context, kept on the operation so that every statement
-- that makes a transition writes it into the transition's event.
ALTER TABLE idem_operations ADD COLUMN principal text, ADD COLUMN target text, ADD COLUMN run_id text,
    ADD COLUMN trace_id text, ADD COLUMN response_sha256 text;

-- hashes are the tree hashes stored with this leaf (tlog's layout: the
-- leaf's, then one per perfect subtree it completes; two on average),
-- concatenated, set with seq when the event is sealed.
ALTER TABLE idem_audit_events ADD COLUMN hashes bytea;

-- One log per tenant: its size, and its latest checkpoint's.
CREATE TABLE idem_audit_heads (
    tenant          text PRIMARY KEY,
    size            bigint NOT NULL,
    checkpoint_size bigint NOT NULL DEFAULT 0,
    checkpoint_at   timestamptz NOT NULL DEFAULT 'epoch'
);

-- Signed checkpoints. The primary key is the promise that the log never
-- signs two roots for one size.
CREATE TABLE idem_audit_checkpoints (
    tenant text NOT NULL,
    size   bigint NOT NULL,
    root   bytea NOT NULL,
    signed text NOT NULL,
    at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, size)
);

CREATE OR REPLACE FUNCTION idem_audit_approval() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, key, fingerprint,
        route, target, actor, reason)
    SELECT NEW.tenant, now(), CASE NEW.status WHEN 'approved' THEN 'approved' ELSE 'approval_expired' END,
        NEW.op_id, NEW.requested_by, o.run_id, o.trace_id, NEW.key, NEW.fingerprint, NEW.route, NEW.target,
        CASE NEW.status WHEN 'approved' THEN NEW.decided_by ELSE 'idemgate:approval-expiry' END,
        'approval ' || NEW.id || ' ' || NEW.status
    FROM (SELECT 1) one LEFT JOIN idem_operations o ON o.id = NEW.op_id;
    RETURN NULL;
END $$;
