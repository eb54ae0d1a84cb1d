package contract

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strconv"

	"github.com/idemgate/idemgate/ledger"
)

// MediaProblem is RFC 9457's media type of a problem body.
const MediaProblem = "application/problem+json"

// ProblemTypePrefix starts the type of every idemgate problem; the code
// follows it.
const ProblemTypePrefix = "urn:idemgate:problem:"

// ControlPrefix is the control API's path prefix (docs/design.md, "The web
// page"), the status resources problems link to.
const ControlPrefix = "/_idem/v1"

// OperationByKeyPath is the control API's path of the operation under key.
func OperationByKeyPath(key string) string {
	return ControlPrefix + "/operations?key=" + url.QueryEscape(key)
}

// ApprovalPath is the control API's path of an approval.
func ApprovalPath(id string) string { return ControlPrefix + "/approvals/" + url.PathEscape(id) }

// Problem is an RFC 9457 problem body with idemgate's members (docs/design.md,
// "The HTTP contract"): what the server sends and clients read. A client
// reads one with ReadProblem; a server makes one with NewProblem or
// ProblemFor and sends it with Write.
type Problem struct {
	Type        string       `json:"type"`
	Title       string       `json:"title"`
	Status      int          `json:"status"`
	Detail      string       `json:"detail"`
	Code        string       `json:"code"`
	OperationID string       `json:"operation_id,omitempty"`
	State       ledger.State `json:"state,omitempty"`
	StatusURL   string       `json:"status_url,omitempty"`

	// RetryAfter, in seconds, is sent as Retry-After when set.
	RetryAfter int `json:"-"`
	// OtherOperation marks operation_id as another key's operation (a
	// concurrency group's holder): it is named in the body, and the
	// Idempotency-Operation header, which is this key's, is left out.
	OtherOperation bool `json:"-"`
}

// problemKinds is the one map from a problem code to its status and title.
var problemKinds = map[string]struct {
	status int
	title  string
}{
	CodeMissingKey:           {http.StatusBadRequest, HeaderKey + " required"},
	CodeInvalidKey:           {http.StatusBadRequest, "Invalid " + HeaderKey},
	CodeInvalidCommand:       {http.StatusUnprocessableEntity, "Invalid command"},
	CodeFingerprintMismatch:  {http.StatusUnprocessableEntity, HeaderKey + " reused with a different request"},
	CodeInProgress:           {http.StatusConflict, "Operation in progress"},
	CodeOutcomeUnknown:       {http.StatusConflict, "Outcome unknown"},
	CodeConcurrencyLocked:    {http.StatusConflict, "Concurrency group locked"},
	CodeApprovalDenied:       {http.StatusForbidden, "Approval denied"},
	CodeApprovalRequired:     {http.StatusAccepted, "Approval required"},
	CodeApprovalExpired:      {http.StatusAccepted, "Approval expired; a new one was requested"},
	CodeApprovalMismatch:     {http.StatusConflict, "Decision for another request"},
	CodeApprovalClosed:       {http.StatusConflict, "Approval no longer pending"},
	CodeUnauthorized:         {http.StatusUnauthorized, "Unauthorized"},
	CodeForbidden:            {http.StatusForbidden, "Forbidden"},
	CodePayloadTooLarge:      {http.StatusRequestEntityTooLarge, "Payload too large"},
	CodeUpstreamUnavailable:  {http.StatusBadGateway, "Upstream unavailable"},
	CodeStoreUnavailable:     {http.StatusServiceUnavailable, "Idempotency store unavailable"},
	CodeUnsupportedMediaType: {http.StatusUnsupportedMediaType, "Unsupported media type"},
	CodeRateLimited:          {http.StatusTooManyRequests, "Rate limited"},
	CodeInvalidRequest:       {http.StatusBadRequest, "Invalid request"},
	CodeIllegalTransition:    {http.StatusConflict, "Not allowed in the operation's state"},
	CodeLeaseLost:            {http.StatusConflict, "Lease lost"},
	CodeNotFound:             {http.StatusNotFound, "Not found"},
	CodeInternal:             {http.StatusInternalServerError, "Internal error"},
}

// NewProblem is the problem for code, with its status and title; an
// unknown code is internal's.
func NewProblem(code, detail string) *Problem {
	k, ok := problemKinds[code]
	if !ok {
		k = problemKinds[CodeInternal]
	}
	return &Problem{Type: ProblemTypePrefix + code, Title: k.title, Status: k.status, Detail: detail, Code: code}
}

// StatusOf is the status a code is answered with (internal's for an
// unknown code).
func StatusOf(code string) int {
	if k, ok := problemKinds[code]; ok {
		return k.status
	}
	return problemKinds[CodeInternal].status
}

// Error makes a Problem an error: a client returns the problem it was
// answered, a server hook (httpidem's Admit) refuses with one.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// For attaches an operation: its id, state and status resource under
// statusBase (the control API's prefix; none when empty).
func (p *Problem) For(op *ledger.Operation, statusBase string) *Problem {
	if op != nil {
		p.OperationID, p.State = op.ID, op.State
		if statusBase != "" {
			p.StatusURL = statusBase + "/operations/" + op.ID
		}
	}
	return p
}

// WithStatus overrides the status (outcome_unknown is 502 or 504 on the
// attempt that lost the answer, 409 on retries).
func (p *Problem) WithStatus(status int) *Problem {
	p.Status = status
	return p
}

// Write sends the problem, never cached, in the shape w asks for
// (ShapeOf: RFC 9457's by default), and tells a CodeNoter of w which code
// it answered. The operation it names, its state and its status resource
// are in headers whatever the shape.
func (p *Problem) Write(w http.ResponseWriter) {
	NoteCode(w, p.Code)
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	p.setHeaders(h)
	shape := ShapeOf(w)
	body := shape.Render(h, p)
	status := p.Status
	if s, ok := shape.(StatusShape); ok {
		status = s.Status(p)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// setHeaders sets the headers that carry the problem's members.
func (p *Problem) setHeaders(h http.Header) {
	switch {
	case p.OperationID == "":
	case p.OtherOperation:
		h.Set(HeaderLockedBy, p.OperationID)
	default:
		h.Set(HeaderOperation, p.OperationID)
	}
	if p.State != "" {
		h.Set(HeaderState, string(p.State))
	}
	if p.StatusURL != "" {
		h.Set(HeaderStatusURL, p.StatusURL)
	}
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
}

// CodeNoter is a ResponseWriter that keeps the code its answer carries
// (the data plane's metrics count answers by code). Problem.Write and an
// acceptance tell it through NoteCode.
type CodeNoter interface {
	NoteCode(code string)
}

// NoteCode tells the CodeNoter that w is, or wraps (Unwrap, as
// http.ResponseController reads it), which code its answer carries.
func NoteCode(w http.ResponseWriter, code string) {
	for w != nil {
		if n, ok := w.(CodeNoter); ok {
			n.NoteCode(code)
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// ReadProblem reads an answer as a problem: ok only when its media type
// is MediaProblem and its body parses.
func ReadProblem(h http.Header, body []byte) (p Problem, ok bool) {
	media, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil || media != MediaProblem || json.Unmarshal(body, &p) != nil {
		return Problem{}, false
	}
	return p, true
}
