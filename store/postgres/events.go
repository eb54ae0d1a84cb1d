package postgres

import (
	"strings"

	"github.com/idemgate/idemgate/audit"
)

// recorded is the INSERT of the audit events of the transitions in src (a
// CTE returning operation columns), from and to being SQL expressions of
// the states, actor and reason of the history: every statement that makes
// a transition writes its event with it, so every write path records it.
func recorded(src, from, to, at, actor, reason string) string {
	r := strings.NewReplacer("{src}", src, "{from}", from, "{to}", to, "{at}", at, "{actor}", actor, "{reason}", reason)
	return r.Replace(`INSERT INTO idem_audit_events (tenant, at, kind, operation_id, key, fingerprint, route,
		from_state, to_state, actor, reason, upstream_status, result_ref, principal, run_id, trace_id, target,
		response_sha256, namespace)
	SELECT {src}.tenant, {at}, ` + kindSQL + `, {src}.id, {src}.key, {src}.fingerprint, {src}.route,
		{from}, {to}, {actor}, {reason},
		CASE WHEN {to} IN ('succeeded', 'failed') THEN {src}.response_status END, {src}.result_ref,
		{src}.principal, {src}.run_id, {src}.trace_id, {src}.target,
		CASE WHEN {to} IN ('succeeded', 'failed') THEN {src}.response_sha256 END,
		nullif({src}.namespace, '` + audit.ClientsNamespace + `')`)
}

// eventContext is the operation columns recorded() reads besides those of
// opColumns, for statements that return fewer, qualified by o.
const eventContext = `o.principal, o.run_id, o.trace_id, o.target, o.response_sha256, o.namespace`

// kindSQL names a transition's event by its move (audit.Kind).
const kindSQL = `CASE
		WHEN {to} = 'executing' THEN 'forwarded'
		WHEN {from} IS NULL AND {src}.approval_id IS NOT NULL THEN 'approval_requested'
		WHEN {from} IS NULL THEN 'received'
		WHEN {from} = 'unknown' THEN 'resolved'
		WHEN {from} = 'prepared' AND {to} = 'failed' THEN 'denied'
		WHEN {to} = 'prepared' THEN 'released'
		ELSE {to}
	END`
