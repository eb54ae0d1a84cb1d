package contract

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/url"

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
// "The HTTP contract"): what the server sends and clients read.
type Problem struct {
	Type        string       `json:"type"`
	Title       string       `json:"title"`
	Status      int          `json:"status"`
	Detail      string       `json:"detail"`
	Code        string       `json:"code"`
	OperationID string       `json:"operation_id,omitempty"`
	State       ledger.State `json:"state,omitempty"`
	StatusURL   string       `json:"status_url,omitempty"`
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
	CodeNotFound:             {http.StatusNotFound, "Not found"},
	CodeInternal:             {http.StatusInternalServerError, "Internal error"},
}

// NewProblem is the problem for code, with its status and title; an
// unknown code is internal's.
func NewProblem(code, detail string) Problem {
	k, ok := problemKinds[code]
	if !ok {
		k = problemKinds[CodeInternal]
	}
	return Problem{Type: ProblemTypePrefix + code, Title: k.title, Status: k.status, Detail: detail, Code: code}
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
