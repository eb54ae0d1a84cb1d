package httpidem

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/keyed"
)

// request is a keyed write, read and checked, ready to be reserved.
type request struct {
	route       *route
	tenant      string
	key         string // "" when absent and not required
	body        []byte // as received, forwarded unchanged
	command     any    // parsed and validated
	fingerprint string
	// What the fingerprint binds besides the command, kept for an
	// approval's policy: path parameters, query, named headers.
	params    map[string]string
	query     map[string][]string
	rawQuery  string
	headers   map[string]string
	principal approval.Principal // set on routes that ask for approvals
	header    http.Header        // as received: an approval keeps it (approvalHeaders)
	// The audit log's context: who (the principal's name), the agent run
	// (Idempotency-Run), the W3C trace, and the target (method and path).
	who, run, trace, target string
}

// readRequest reads and checks everything about r before anything is
// reserved: a refusal here changes nothing.
func (m *Middleware) readRequest(r *http.Request, rt *route) (*request, *contract.Problem) {
	req := &request{route: rt, header: r.Header}
	var present bool
	var err error
	if rt.keyHeader != "" {
		if req.key, present, err = keyFromHeader(r, rt.keyHeader); err != nil {
			return nil, contract.NewProblem(contract.CodeInvalidKey, err.Error())
		}
		if !present && rt.requireKey {
			return nil, contract.NewProblem(contract.CodeMissingKey, "this route requires an "+rt.keyHeader+" header: "+
				"one value per intended action, reused on every retry of it")
		}
	}
	if req.body, err = readBody(r, rt.MaxBody); err != nil {
		return nil, contract.ProblemFor(err)
	}
	if !present && rt.keyPointer == nil {
		return req, nil // keyless, not required: passes through unrecorded
	}
	if req.tenant, err = m.opts.Tenant(r); err != nil {
		return nil, contract.NewProblem(contract.CodeUnauthorized, err.Error())
	}
	if p := m.context(r, req); p != nil {
		return nil, p
	}
	if p := req.parseCommand(r); p != nil {
		return nil, p
	}
	if rt.keyPointer != nil {
		if p := req.keyFromBody(); p != nil {
			return nil, p
		}
	}
	if p := req.fingerprintOf(r); p != nil {
		return nil, p
	}
	return req, nil
}

// fingerprintOf binds everything the request does: the route, its path
// parameters, its query, the command and the named headers.
func (req *request) fingerprintOf(r *http.Request) *contract.Problem {
	rt := req.route
	params, err := rt.pathParams(r)
	if err != nil {
		return contract.NewProblem(contract.CodeInvalidRequest, err.Error())
	}
	query, err := rt.query(r)
	if err != nil {
		return contract.NewProblem(contract.CodeInvalidRequest, err.Error())
	}
	req.params, req.query, req.rawQuery, req.headers = params, query, r.URL.RawQuery, fingerprintHeaders(r, rt.Headers)
	if rt.Action != "" {
		req.query, req.rawQuery = nil, "" // an action's name is all it does: no query
		req.fingerprint, err = fingerprint.OfAction(rt.Action, req.tenant, req.command)
		if err != nil {
			return contract.NewProblem(contract.CodeInvalidCommand, err.Error())
		}
		return nil
	}
	req.fingerprint, err = fingerprint.Of(fingerprint.Request{Method: rt.Method, Route: rt.template, Params: params,
		Query: query, Tenant: req.tenant, Command: req.command, Headers: req.headers})
	if err != nil {
		return contract.NewProblem(contract.CodeInvalidCommand, err.Error())
	}
	return nil
}

// readBody reads at most max bytes; a larger body is ErrTooLarge.
func readBody(r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, tooLarge(r.ContentLength, max)
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidRequest, "reading the body: "+err.Error())
	}
	if int64(len(data)) > max {
		return nil, tooLarge(-1, max)
	}
	return data, nil
}

func tooLarge(size, max int64) error {
	if size < 0 {
		return fmt.Errorf("%w: body over %d bytes", fingerprint.ErrTooLarge, max)
	}
	return fmt.Errorf("%w: body of %d bytes, limit %d", fingerprint.ErrTooLarge, size, max)
}

// parseCommand parses the body by its media type (none is a null
// command), validates it and removes the ignored members.
func (req *request) parseCommand(r *http.Request) *contract.Problem {
	rt := req.route
	types := r.Header.Values("Content-Type")
	if len(types) > 1 {
		return contract.NewProblem(contract.CodeInvalidRequest, "two Content-Type headers; send one")
	}
	contentType := r.Header.Get("Content-Type")
	if rt.Action != "" {
		contentType = "application/json" // an action's command is JSON, whatever a no-code tool says
	}
	cmd, err := fingerprint.ParseBody(contentType, req.body,
		fingerprint.BodyOptions{Limits: fingerprint.Limits{MaxBytes: int(rt.MaxBody)}, Opaque: rt.Opaque})
	if err != nil {
		return contract.ProblemFor(err)
	}
	req.command = cmd
	if rt.Validate != nil {
		cmd, err := rt.Validate(req.command)
		if err != nil {
			return contract.NewProblem(contract.CodeInvalidCommand, err.Error())
		}
		req.command = cmd
	}
	for _, toks := range rt.ignore {
		jsonptr.Remove(req.command, toks)
	}
	// A lock whose value is missing would silently not apply: a deployment
	// with no environment must not escape it. (A missing business key, by
	// contrast, is a command with no business identity: a ticket without a
	// source event.)
	if rt.concurrent != nil && keyed.KeyValue(req.command, rt.concurrent) == "" {
		return contract.NewProblem(contract.CodeInvalidCommand, fmt.Sprintf("the command has no value at /%s, "+
			"which this route's concurrency_key needs", strings.Join(rt.concurrent, "/")))
	}
	return nil
}

// keyFromBody takes the key from a JSON Pointer (a webhook's delivery id).
func (req *request) keyFromBody() *contract.Problem {
	v, ok := jsonptr.Get(req.command, req.route.keyPointer)
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = x.String()
	}
	if !ok || s == "" {
		return contract.NewProblem(contract.CodeMissingKey, "the body has no key at "+req.route.KeyFrom)
	}
	key, err := contract.ParseKey(s)
	if err != nil {
		return contract.NewProblem(contract.CodeInvalidKey, err.Error())
	}
	req.key = key
	return nil
}

// fingerprintHeaders picks the route's named headers; one that is absent is
// fingerprinted as empty.
func fingerprintHeaders(r *http.Request, names []string) map[string]string {
	if len(names) == 0 {
		return nil
	}
	h := make(map[string]string, len(names))
	for _, n := range names {
		h[n] = strings.Join(r.Header.Values(n), ", ")
	}
	return h
}

// businessKey is the value at the route's business key, or the body's
// digest where the route says so (Route.DigestKey).
func (req *request) businessKey() string {
	if req.route.DigestKey {
		sum := sha256.Sum256(req.body)
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return keyed.KeyValue(req.command, req.route.business)
}

// probeOf renders the route's probe for req; one that cannot be rendered
// (a field the template names is missing) leaves the operation to an
// operator, should it become unknown, and is logged.
func (m *Middleware) probeOf(req *request) string {
	if req.route.Probe == nil {
		return ""
	}
	probe, err := req.route.Probe(req.params, req.query, req.command)
	if err != nil {
		m.opts.Logger.Warn("probe not rendered", slog.String("route", req.route.name),
			slog.String("error", err.Error()))
		return ""
	}
	return probe
}

// context reads who sends req, from which agent run and trace, to what:
// the principal is required on routes that ask for approvals.
func (m *Middleware) context(r *http.Request, req *request) *contract.Problem {
	var p *contract.Problem
	if req.run, p = runOf(r); p != nil {
		return p
	}
	req.trace, req.target = traceOf(r), req.route.Method+" "+r.URL.Path
	if req.route.Action != "" {
		req.target = contract.ActionTarget(req.route.Action)
	}
	if m.opts.Principal == nil {
		return nil
	}
	pr, err := m.opts.Principal(r)
	switch {
	case err == nil:
		req.principal, req.who = pr, pr.Name
	case req.route.Approval != nil:
		return contract.NewProblem(contract.CodeUnauthorized, err.Error())
	}
	return nil
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

// traceOf reads the trace id of r's W3C traceparent header
// (contract.TraceID).
func traceOf(r *http.Request) string {
	return contract.TraceID(r.Header.Get(contract.HeaderTraceparent))
}
