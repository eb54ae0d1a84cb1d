-- Key namespaces and kinds (docs/design.md, "Words", issue 30): an
-- operation is unique by (tenant, namespace, key), and its kind (route,
-- action, mcp, consumer, webhook) is a column, never read from its route
-- again.
--
-- Locks and cost, for a large table. Migrations run in one transaction,
-- so every lock below is held until it commits:
--   * ADD COLUMN with a constant default changes the catalogue only (no
--     rewrite of the table, PostgreSQL 11 and later), but takes ACCESS
--     EXCLUSIVE on idem_operations: from here to the commit no other
--     session reads or writes operations (a running gateway's requests
--     wait; none fails for it).
--   * CREATE UNIQUE INDEX reads the table once and sorts it: the longest
--     step, about as long as building one index of three text columns.
--   * The UPDATE writes only the operations that are not a plain route's
--     (actions, consumers, MCP calls, webhooks): one scan, and a new row
--     version for each of those.
--   * The CHECK is added NOT VALID: no scan (the values written here are
--     valid, and new rows are checked).
-- Nothing else is rewritten. Adding the columns to idem_audit_events and
-- idem_effects (nullable, or with a constant default) is catalogue only,
-- under their own ACCESS EXCLUSIVE locks, held likewise to the commit.
ALTER TABLE idem_operations ADD COLUMN namespace text NOT NULL DEFAULT 'clients',
    ADD COLUMN kind text NOT NULL DEFAULT 'route';
ALTER TABLE idem_operations ADD CONSTRAINT idem_operations_kind
    CHECK (kind IN ('route', 'action', 'mcp', 'consumer', 'webhook')) NOT VALID;

-- (tenant, namespace, key) replaces (tenant, key). Every operation is in
-- the clients' namespace until the UPDATE below, so the new index holds
-- whatever the old constraint held.
CREATE UNIQUE INDEX idem_operations_tenant_namespace_key ON idem_operations (tenant, namespace, key);
ALTER TABLE idem_operations DROP CONSTRAINT idem_operations_tenant_key;
ALTER TABLE idem_operations ADD CONSTRAINT idem_operations_tenant_namespace_key
    UNIQUE USING INDEX idem_operations_tenant_namespace_key;

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
--   anything else                    kind route, the clients' namespace
--                                    (the columns' defaults: not updated).
-- No two operations move to one (tenant, namespace, key): the new forms
-- are one per (tool, principal, intent), every other key keeps its value,
-- and the namespaces they move to were empty.
UPDATE idem_operations o SET kind = m.kind, namespace = m.namespace, key = m.key
FROM (
    SELECT id, kind,
        CASE kind
            WHEN 'consumer' THEN 'consumer/' || substr(route, 10)
            WHEN 'webhook' THEN 'webhook' || substr(principal, 9)
            WHEN 'mcp' THEN CASE WHEN intent IS NOT NULL OR hashed THEN 'mcp/' ELSE 'mcp-meta/' END || server
            ELSE 'clients'
        END AS namespace,
        CASE WHEN intent IS NOT NULL AND octet_length(intent_key) <= 255 THEN intent_key ELSE key END AS key
    FROM (
        SELECT *, replace(replace(tool, '%', '%25'), '/', '%2F') || '/' ||
            replace(replace(principal, '%', '%25'), '/', '%2F') || '/' ||
            replace(replace(intent, '%', '%25'), '/', '%2F') AS intent_key
        FROM (
            SELECT *,
                CASE WHEN kind = 'mcp' AND principal IS NOT NULL AND length(key) > length(prefix)
                    AND starts_with(key, prefix) THEN substr(key, length(prefix) + 1) END AS intent,
                kind = 'mcp' AND key ~ '^mcp/sha256/[0-9a-f]{64}$' AS hashed
            FROM (
                SELECT id, key, route, principal,
                    CASE
                        WHEN starts_with(route, 'action:') THEN 'action'
                        WHEN starts_with(route, 'consumer:') THEN 'consumer'
                        WHEN starts_with(route, 'mcp:') THEN 'mcp'
                        ELSE 'webhook'
                    END AS kind,
                    split_part(substr(route, 5), '/', 1) AS server,
                    substr(route, 5 + strpos(substr(route, 5), '/')) AS tool,
                    'mcp/' || substr(route, 5) || '/' || principal || '/' AS prefix
                FROM idem_operations
                WHERE starts_with(route, 'action:') OR starts_with(route, 'consumer:') OR starts_with(route, 'mcp:')
                    OR starts_with(principal, 'webhook:')
            ) r
        ) d
    ) e
) m
WHERE o.id = m.id;

-- An event names its operation's namespace, unless it is the clients'
-- (NULL): an event of before namespaces, or of a client's key, has the
-- same leaf as ever (audit.Event.Leaf leaves the member out).
ALTER TABLE idem_audit_events ADD COLUMN namespace text;

-- As 0009 made it, with the namespace.
CREATE OR REPLACE FUNCTION idem_audit_approval() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, run_id, trace_id, namespace, key,
        fingerprint, route, target, actor, reason)
    SELECT NEW.tenant, now(), CASE NEW.status WHEN 'approved' THEN 'approved' ELSE 'approval_expired' END,
        NEW.op_id, NEW.requested_by, o.run_id, o.trace_id, nullif(o.namespace, 'clients'), NEW.key, NEW.fingerprint,
        NEW.route, NEW.target,
        CASE NEW.status WHEN 'approved' THEN NEW.decided_by ELSE 'idemgate:approval-expiry' END,
        'approval ' || NEW.id || ' ' || NEW.status ||
            CASE WHEN NEW.status = 'approved' AND NEW.note <> '' THEN ': ' || NEW.note ELSE '' END
    FROM (SELECT 1) one LEFT JOIN idem_operations o ON o.id = NEW.op_id;
    RETURN NULL;
END $$;

-- An effect belongs to its operation's namespace: its derived key names
-- it (ledger.EffectKey) unless it is the clients', and an operation's
-- effects are those of (tenant, namespace, operation key). The index of
-- an operation's effects stays (tenant, op_key, seq): the rows it finds
-- for a key in several namespaces are few.
ALTER TABLE idem_effects ADD COLUMN namespace text NOT NULL DEFAULT 'clients';
