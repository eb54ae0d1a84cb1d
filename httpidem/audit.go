package httpidem

import (
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Recorder hears the audit events that record no transition: a replay, a
// conflict, a retry answered as its operation stands. The transitions'
// events are the store's, written with them. Record must not block long:
// it is on the request's path (ledger.EventBatcher only queues).
type Recorder interface {
	Record(e audit.Event)
}

// runOf reads the agent's run id (Idempotency-Run): printable text, one
// header, at most contract.MaxRunLen bytes.
func runOf(r *http.Request) (string, *contract.Problem) {
	values := r.Header.Values(contract.HeaderRun)
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", contract.NewProblem(contract.CodeInvalidRequest, fmt.Sprintf("%d %s headers; send one", len(values), contract.HeaderRun))
	}
	run := strings.TrimSpace(values[0])
	if len(run) > contract.MaxRunLen || !utf8.ValidString(run) || strings.IndexFunc(run, notPrintable) >= 0 {
		return "", contract.NewProblem(contract.CodeInvalidRequest, fmt.Sprintf("%s must be printable text of at most %d bytes",
			contract.HeaderRun, contract.MaxRunLen))
	}
	return run, nil
}

func notPrintable(r rune) bool { return !unicode.IsPrint(r) }

// traceOf reads the trace id of a W3C traceparent header
// ("00-<32 hex>-<16 hex>-<2 hex>"). One that does not parse is ignored,
// as Trace Context asks: a trace is context, never a reason to refuse.
func traceOf(r *http.Request) string {
	v := strings.TrimSpace(r.Header.Get(contract.HeaderTraceparent))
	parts := strings.Split(v, "-")
	if len(parts) < 4 || len(parts[0]) != 2 || parts[0] == "ff" || len(parts[1]) != 32 || len(parts[2]) != 16 ||
		len(parts[3]) != 2 || (parts[0] == "00" && len(parts) != 4) {
		return ""
	}
	for _, p := range parts[:4] {
		if !lowerHex(p) {
			return ""
		}
	}
	if strings.Trim(parts[1], "0") == "" || strings.Trim(parts[2], "0") == "" {
		return ""
	}
	return parts[1]
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// note records an event of req that is no transition, when a Recorder
// listens: op is the operation it was answered from, if any.
func (m *Middleware) note(req *request, kind audit.Kind, op *ledger.Operation, reason string) {
	if m.opts.Audit == nil || req == nil || req.key == "" {
		return
	}
	e := audit.Event{At: time.Now(), Tenant: req.tenant, Kind: kind, Principal: req.who, RunID: req.run,
		TraceID: req.trace, Key: req.key, Fingerprint: req.fingerprint,
		Route: req.route.Method + " " + req.route.template, Target: req.target, Actor: m.opts.Actor, Reason: reason}
	if op != nil {
		e.OperationID = op.ID
	}
	if op != nil && (kind == audit.Replayed || kind == audit.Duplicate) && op.State.Final() {
		// The answer given: the stored one, named, never held.
		e.ResultRef, e.ResponseSHA256 = op.ResultRef, op.ResponseSHA256
		if op.Response != nil {
			e.UpstreamStatus = op.Response.Status
		}
	}
	m.opts.Audit.Record(e)
}

// noteUnrecorded records an upstream answer the store could not record:
// the effect may have happened, and this is the log's word of it.
func (m *Middleware) noteUnrecorded(req *request, opID string, status int, ref string) {
	if m.opts.Audit == nil {
		return
	}
	e := audit.Event{At: time.Now(), Tenant: req.tenant, OperationID: opID, Kind: audit.AnswerUnrecorded,
		Principal: req.who, RunID: req.run, TraceID: req.trace, Key: req.key, Fingerprint: req.fingerprint,
		Route: req.route.Method + " " + req.route.template, Target: req.target, Actor: m.opts.Actor,
		UpstreamStatus: status, ResultRef: ref, Reason: "answered to the client, not recorded: the store failed"}
	m.opts.Audit.Record(e)
}
