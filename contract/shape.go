package contract

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Shape is how a problem's body is written for the clients of one API
// (docs/design.md, "Error shapes"): an API's own SDK may read only its
// own form of error, and take any other body for a success. The status,
// the code and the problem's headers stay the contract's (ProblemFor,
// Problem.Write); a shape chooses only the body, its media type, and the
// headers that API's clients read to decide on a retry.
type Shape interface {
	// Render sets on h the media type of p's body, and any header the
	// shape adds, and returns the body.
	Render(h http.Header, p *Problem) []byte
}

// StatusShape is a Shape whose API answers some refusals with another
// status than the contract's, which its clients pick their errors by.
type StatusShape interface {
	Shape
	// Status is the status p is answered with in this shape.
	Status(p *Problem) int
}

// ProblemShape is RFC 9457's application/problem+json, the default.
var ProblemShape Shape = problemShape{}

// StripeShape is the error object of Stripe's API, which its SDKs raise
// on: {"error":{"type","code","message","doc_url", and the problem's
// operation_id, state and status_url}}, with Stripe-Should-Retry.
var StripeShape Shape = stripeShape{}

// DocURL documents the codes of the HTTP contract: a shape's link for a
// client that wants to know what a code means.
const DocURL = "https://github.com/idemgate/idemgate/blob/main/docs/design.md#the-http-contract-gateway-and-middleware"

type problemShape struct{}

func (problemShape) Render(h http.Header, p *Problem) []byte {
	h.Set("Content-Type", MediaProblem)
	return encode(p)
}

type stripeShape struct{}

// stripeError is Stripe's error object with the problem's members.
type stripeError struct {
	Type        string `json:"type"`
	Code        string `json:"code"`
	Message     string `json:"message"`
	DocURL      string `json:"doc_url"`
	OperationID string `json:"operation_id,omitempty"`
	State       string `json:"state,omitempty"`
	StatusURL   string `json:"status_url,omitempty"`
}

func (stripeShape) Render(h http.Header, p *Problem) []byte {
	h.Set("Content-Type", "application/json")
	// Stripe's SDKs retry a 409 and any 5xx unless told not to: an
	// unknown outcome or a conflict would only be asked again.
	h.Set("Stripe-Should-Retry", strconv.FormatBool(Retryable(p.Code)))
	message := p.Detail
	if message == "" {
		message = p.Title
	}
	return encode(struct {
		Error stripeError `json:"error"`
	}{stripeError{Type: stripeType(p.Code), Code: p.Code, Message: message, DocURL: DocURL,
		OperationID: p.OperationID, State: string(p.State), StatusURL: p.StatusURL}})
}

// Status is Stripe's for an idempotency_error, 400, which its SDKs
// expect (the v1 SDK raises StripeIdempotencyError only for a 400), for
// every idempotency refusal that a retry alone would not change (a reused
// key, an unknown outcome, a closed approval); those a retry may change
// keep theirs: a 409 in progress or locked (Stripe's own for a key in use,
// which its SDKs retry), a 503 or 502 of a store or an upstream away.
func (stripeShape) Status(p *Problem) int {
	if stripeType(p.Code) == "idempotency_error" && !Retryable(p.Code) {
		return http.StatusBadRequest
	}
	return p.Status
}

// stripeType is the type of Stripe's error object for a code: what the
// request itself got wrong is invalid_request_error, as Stripe says it;
// an internal error is api_error; every answer of the idempotency layer
// (a reused key, an operation in progress or unknown, a store or an
// upstream away) is idempotency_error.
func stripeType(code string) string {
	switch code {
	case CodeNotFound, CodeInvalidRequest, CodeInvalidCommand, CodePayloadTooLarge, CodeUnsupportedMediaType,
		CodeUnauthorized, CodeForbidden, CodeRateLimited:
		return "invalid_request_error"
	case CodeInternal:
		return "api_error"
	}
	return "idempotency_error"
}

// Retryable reports whether the same request, with the same key, may be
// answered otherwise later without anyone acting: it is in progress, its
// group is locked, its tenant is over its rate, or the store or the
// upstream was away (nothing was sent).
func Retryable(code string) bool {
	switch code {
	case CodeInProgress, CodeConcurrencyLocked, CodeRateLimited, CodeStoreUnavailable, CodeUpstreamUnavailable:
		return true
	}
	return false
}

// encode is v's JSON and a newline, as json.Encoder writes it.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("{}\n")
	}
	return append(b, '\n')
}

// Shaped returns w, whose problems are then written in s: Problem.Write
// finds s through every writer that wraps w (Unwrap), as NoteCode finds a
// CodeNoter. The Shaped writer applied last (nearest the handler) wins.
func Shaped(w http.ResponseWriter, s Shape) http.ResponseWriter {
	if s == nil {
		return w
	}
	return &shapedWriter{ResponseWriter: w, shape: s}
}

type shapedWriter struct {
	http.ResponseWriter
	shape Shape
}

// Unwrap lets http.ResponseController, NoteCode and ShapeOf reach the
// writer beneath.
func (s *shapedWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush passes a flush on, for handlers that test for http.Flusher.
func (s *shapedWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

// ShapeOf is the shape of w's problems: the first Shaped writer found from
// w inward, else ProblemShape.
func ShapeOf(w http.ResponseWriter) Shape {
	for w != nil {
		if s, ok := w.(*shapedWriter); ok {
			return s.shape
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	return ProblemShape
}
