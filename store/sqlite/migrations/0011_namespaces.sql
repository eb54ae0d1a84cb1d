-- Key namespaces and kinds (docs/design.md, "Words", issue 30): an
-- operation is unique by (tenant, namespace, key), and its kind (route,
-- action, mcp, consumer, webhook) is a column, never read from its route
-- again. The unique constraint is part of the table's definition (a
-- WITHOUT ROWID table's), so the table is rebuilt: created anew, filled
-- from the old one (every column, each existing operation moved into its
-- namespace on the way), the old one dropped with its indexes and
-- triggers, and all of them made again. Like every migration it runs in
-- one transaction under the writer's lock: other processes wait for it,
-- and it costs one copy of the operations table (twice its size on disk
-- until the next checkpoint).

-- The triggers of idem_approvals name idem_operations: renaming the new
-- table checks every trigger of the schema, and theirs would name a table
-- that is gone. They are made again below.
DROP TRIGGER idem_approvals_moved;
DROP TRIGGER idem_approvals_audited;

CREATE TABLE idem_operations_new (
    id                  TEXT PRIMARY KEY,
    tenant              TEXT NOT NULL,
    namespace           TEXT NOT NULL DEFAULT 'clients',
    key                 TEXT NOT NULL,
    kind                TEXT NOT NULL DEFAULT 'route'
        CHECK (kind IN ('route', 'action', 'mcp', 'consumer', 'webhook')),
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
    principal           TEXT,
    target              TEXT,
    run_id              TEXT,
    trace_id            TEXT,
    response_sha256     TEXT,
    probe               TEXT,
    probe_token         TEXT,
    probe_fence         INTEGER NOT NULL DEFAULT 0,
    probe_until         INTEGER,
    probe_next          INTEGER,
    probes              INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant, namespace, key),
    CHECK ((state = 'executing') = (lease_until IS NOT NULL))
) STRICT, WITHOUT ROWID;

-- Each operation into its namespace, from its route and its principal
-- only (what the previous release wrote):
--   action:NAME                      kind action, the clients' namespace;
--   consumer:NAME                    kind consumer, consumer/NAME;
--   mcp:SERVER/TOOL                  kind mcp: a key the proxy derived,
--       mcp/SERVER/TOOL/PRINCIPAL/INTENT, goes to mcp/SERVER under its new
--       form, esc(TOOL)/esc(PRINCIPAL)/esc(INTENT) (contract.MCPIntentKey;
--       esc escapes % then /), unless that is longer than 255 bytes: then
--       it keeps its old key, which no call derives any more, and is
--       forgotten at its retention; a key the proxy hashed,
--       mcp/sha256/HEX, stays as it is in mcp/SERVER, as unreachable;
--       any other key is a client's own from _meta: mcp-meta/SERVER;
--   a principal webhook:PATH         kind webhook, webhookPATH;
--   anything else                    kind route, the clients' namespace.
INSERT INTO idem_operations_new (id, tenant, namespace, key, kind, route, fingerprint, state, attempts, owner_token,
    fence, lease_until, business_key, concurrency_key, approval_id, approval_status, approval_expires_at,
    response_status, response_headers, response_body, result_ref, last_error, retention_us, last_actor, last_reason,
    created_at, updated_at, expires_at, principal, target, run_id, trace_id, response_sha256, probe, probe_token,
    probe_fence, probe_until, probe_next, probes)
SELECT id, tenant,
    CASE kind
        WHEN 'consumer' THEN 'consumer/' || substr(route, 10)
        WHEN 'webhook' THEN 'webhook' || substr(principal, 9)
        WHEN 'mcp' THEN CASE WHEN intent IS NOT NULL OR hashed THEN 'mcp/' ELSE 'mcp-meta/' END || server
        ELSE 'clients'
    END,
    CASE WHEN intent IS NOT NULL AND octet_length(intent_key) <= 255 THEN intent_key ELSE key END,
    kind, route, fingerprint, state, attempts, owner_token,
    fence, lease_until, business_key, concurrency_key, approval_id, approval_status, approval_expires_at,
    response_status, response_headers, response_body, result_ref, last_error, retention_us, last_actor, last_reason,
    created_at, updated_at, expires_at, principal, target, run_id, trace_id, response_sha256, probe, probe_token,
    probe_fence, probe_until, probe_next, probes
FROM (
    SELECT *, replace(replace(tool, '%', '%25'), '/', '%2F') || '/' ||
        replace(replace(principal, '%', '%25'), '/', '%2F') || '/' ||
        replace(replace(intent, '%', '%25'), '/', '%2F') AS intent_key
    FROM (
        SELECT *,
            CASE WHEN kind = 'mcp' AND principal IS NOT NULL AND length(key) > length(prefix)
                AND substr(key, 1, length(prefix)) = prefix THEN substr(key, length(prefix) + 1) END AS intent,
            kind = 'mcp' AND length(key) = 75 AND substr(key, 1, 11) = 'mcp/sha256/'
                AND substr(key, 12) NOT GLOB '*[^0-9a-f]*' AS hashed
        FROM (
            SELECT *,
                CASE
                    WHEN substr(route, 1, 7) = 'action:' THEN 'action'
                    WHEN substr(route, 1, 9) = 'consumer:' THEN 'consumer'
                    WHEN substr(route, 1, 4) = 'mcp:' THEN 'mcp'
                    WHEN substr(principal, 1, 8) = 'webhook:' THEN 'webhook'
                    ELSE 'route'
                END AS kind,
                substr(route, 5, instr(substr(route, 5), '/') - 1) AS server,
                substr(route, 5 + instr(substr(route, 5), '/')) AS tool,
                'mcp/' || substr(route, 5) || '/' || principal || '/' AS prefix
            FROM idem_operations
        )
    )
);

-- Its indexes and triggers go with it.
DROP TABLE idem_operations;
ALTER TABLE idem_operations_new RENAME TO idem_operations;

-- As 0001 made them (idem_operations_concurrency as 0003 did): business and
-- concurrency keys stay (tenant, route, value).
CREATE INDEX idem_operations_live ON idem_operations (state, lease_until, tenant, id)
    WHERE state IN ('prepared', 'executing', 'unknown');
CREATE UNIQUE INDEX idem_operations_business ON idem_operations (tenant, route, business_key)
    WHERE business_key IS NOT NULL;
CREATE UNIQUE INDEX idem_operations_concurrency ON idem_operations (tenant, route, concurrency_key)
    WHERE concurrency_key IS NOT NULL
      AND (state IN ('executing', 'unknown')
           OR (state = 'prepared' AND approval_status IN ('pending', 'approved')));
CREATE INDEX idem_operations_purge_due ON idem_operations (expires_at)
    WHERE state IN ('prepared', 'succeeded', 'failed');

-- An event names its operation's namespace, unless it is the clients'
-- (NULL): an event of before namespaces, or of a client's key, has the
-- same leaf as ever (audit.Event.Leaf leaves the member out).
ALTER TABLE idem_audit_events ADD COLUMN namespace TEXT;

-- As 0005 made them, with the namespace.
CREATE TRIGGER idem_operations_reserved AFTER INSERT ON idem_operations
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, namespace, key,
        fingerprint, route, target, from_state, to_state, actor, reason)
    VALUES (NEW.tenant, NEW.updated_at,
        CASE WHEN NEW.state = 'executing' THEN 'forwarded'
             WHEN NEW.approval_id IS NOT NULL THEN 'approval_requested' ELSE 'received' END,
        NEW.id, NEW.principal, NEW.run_id, NEW.trace_id, nullif(NEW.namespace, 'clients'), NEW.key, NEW.fingerprint,
        NEW.route, NEW.target, NULL, NEW.state, NEW.last_actor, NEW.last_reason);
END;

CREATE TRIGGER idem_operations_moved AFTER UPDATE OF state ON idem_operations
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, namespace, key,
        fingerprint, route, target, from_state, to_state, actor, reason, upstream_status, result_ref, response_sha256)
    VALUES (NEW.tenant, NEW.updated_at,
        CASE
            WHEN NEW.state = 'executing' THEN 'forwarded'
            WHEN OLD.state = 'unknown' THEN 'resolved'
            WHEN OLD.state = 'prepared' AND NEW.state = 'failed' THEN 'denied'
            WHEN NEW.state = 'prepared' THEN 'released'
            ELSE NEW.state
        END,
        NEW.id, NEW.principal, NEW.run_id, NEW.trace_id, nullif(NEW.namespace, 'clients'), NEW.key, NEW.fingerprint,
        NEW.route, NEW.target, OLD.state, NEW.state, NEW.last_actor, NEW.last_reason,
        CASE WHEN NEW.state IN ('succeeded', 'failed') THEN NEW.response_status END, NEW.result_ref,
        CASE WHEN NEW.state IN ('succeeded', 'failed') THEN NEW.response_sha256 END);
END;

-- As 0003 made them.
CREATE TRIGGER idem_operations_approval_used AFTER UPDATE OF approval_status ON idem_operations
    WHEN NEW.approval_status = 'used' AND OLD.approval_status = 'approved'
BEGIN
    UPDATE idem_approvals SET status = 'used' WHERE id = NEW.approval_id AND status = 'approved';
END;

CREATE TRIGGER idem_operations_purged_approvals AFTER DELETE ON idem_operations
BEGIN
    DELETE FROM idem_approvals WHERE op_id = OLD.id;
END;

CREATE TRIGGER idem_approvals_moved AFTER UPDATE OF status ON idem_approvals
    WHEN NEW.status IN ('approved', 'expired')
BEGIN
    UPDATE idem_operations SET approval_status = NEW.status, approval_expires_at = NEW.expires_at
    WHERE id = NEW.op_id AND approval_id = NEW.id AND approval_status IN ('pending', 'approved');
END;

-- As 0010 made it, with the namespace.
CREATE TRIGGER idem_approvals_audited AFTER UPDATE OF status ON idem_approvals
    WHEN NEW.status IN ('approved', 'expired') AND OLD.status <> NEW.status
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, namespace, key,
        fingerprint, route, target, actor, reason)
    VALUES (NEW.tenant, CAST(unixepoch('subsec') * 1000000 AS INTEGER),
        CASE NEW.status WHEN 'approved' THEN 'approved' ELSE 'approval_expired' END, NEW.op_id, NEW.requested_by,
        (SELECT run_id FROM idem_operations WHERE id = NEW.op_id),
        (SELECT trace_id FROM idem_operations WHERE id = NEW.op_id),
        (SELECT nullif(namespace, 'clients') FROM idem_operations WHERE id = NEW.op_id),
        NEW.key, NEW.fingerprint, NEW.route, NEW.target,
        CASE NEW.status WHEN 'approved' THEN NEW.decided_by ELSE 'idemgate:approval-expiry' END,
        'approval ' || NEW.id || ' ' || NEW.status ||
            CASE WHEN NEW.status = 'approved' AND NEW.note <> '' THEN ': ' || NEW.note ELSE '' END);
END;

-- An effect belongs to its operation's namespace: its derived key names
-- it (ledger.EffectKey) unless it is the clients', and an operation's
-- effects are those of (tenant, namespace, operation key). The index of
-- an operation's effects stays (tenant, op_key, seq): the rows it finds
-- for a key in several namespaces are few.
ALTER TABLE idem_effects ADD COLUMN namespace TEXT NOT NULL DEFAULT 'clients';
