package contract

// Answer is the upstream's answer as an operator gives it when resolving
// an unknown operation (docs/design.md, "Reconciliation"): its status, its
// headers (each name with its values, as in http.Header) and its body as
// text. Every retry is then given exactly that, marked as a replay. The
// control plane's Operator checks it (control.Operator.Resolve), whichever
// face it came from: the control API, `idemgate ops resolve`, the web page.
type Answer struct {
	Status  int                 `json:"status"`
	Headers map[string][]string `json:"headers"`
	Body    string              `json:"body"`
}

// DefaultMaxResponse bounds an answer's body when no bound is given, as
// the gateway's max_response (and httpidem's Options.MaxResponse) bounds
// a stored response.
const DefaultMaxResponse = 1 << 20

// HeaderAnswerNotKept marks a stored answer that stands in for one too
// large to keep (docs/design.md, "An answer too large to keep"): the
// caller that ran the effect was given the whole answer; every retry is
// given this, the effect's status and a NotKept body.
const HeaderAnswerNotKept = "Idempotency-Answer-Not-Kept"

// CodeAnswerNotKept is a NotKept body's code.
const CodeAnswerNotKept = "answer_not_kept"

// NotKept is the body stored in place of an answer too large to keep:
// its size and digest, which the caller that was given it can match, and
// the limit it was over.
type NotKept struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	Limit  int64  `json:"limit"`
}

// DefaultMaxBody bounds a command's body (a route's, an action's, a
// message's) when no bound is given.
const DefaultMaxBody = 1 << 20
