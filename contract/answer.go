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
