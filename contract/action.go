package contract

import (
	"encoding/json"
	"regexp"
	"strings"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// CodeLeaseLost refuses an owner step (complete, heartbeat, release,
// unknown) whose token or fence no longer holds the operation's lease:
// another owner took it, or the lease lapsed and the operation is
// unknown. Nothing was changed.
const CodeLeaseLost = "lease_lost"

// The actions API (docs/design.md, "Actions"): an effect the caller
// performs itself, reserved at ActionsPath and ended with owner steps.
const (
	// ActionsPath is where an action is reserved: ActionsPath + "/" + name.
	ActionsPath = ControlPrefix + "/actions"
	// actionRoutePrefix starts the route of an action's operations.
	actionRoutePrefix = "action:"
	// DefaultMaxResult bounds a recorded result (64 KiB).
	DefaultMaxResult = 64 << 10
)

// The owner steps of an action's operation: POST
// …/operations/{id}/<step>.
const (
	StepComplete  = "complete"
	StepHeartbeat = "heartbeat"
	StepRelease   = "release"
	StepUnknown   = "unknown"
)

// actionName is what an action may be called: it is a path segment, a
// metrics label and part of every fingerprint, so it is kept plain.
var actionName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ValidActionName reports whether name may name an action.
func ValidActionName(name string) bool { return actionName.MatchString(name) }

// ActionRoute is the route of an action's operations, "action:NAME": an
// operation's route says which action it is, and never meets an HTTP
// route's "METHOD /path".
func ActionRoute(name string) string { return actionRoutePrefix + name }

// ActionTarget is the target of an action's operations, "ACTION NAME".
func ActionTarget(name string) string { return "ACTION " + name }

// ActionOf returns the action a route names ("action:NAME"), if it is
// one: a configured policy's name. An operation's kind is its own field
// (ActionName).
func ActionOf(route string) (string, bool) { return strings.CutPrefix(route, actionRoutePrefix) }

// ActionName returns the action an operation reserved, if it is an
// action's: its kind says so, and its route names it.
func ActionName(op *ledger.Operation) (string, bool) {
	if op.Kind != ledger.KindAction {
		return "", false
	}
	return ActionOf(op.Route)
}

// LeaseView is an owner's lease as the actions API gives it. The token is
// given once, in the answer that grants the lease.
type LeaseView struct {
	Token string    `json:"token,omitempty"`
	Fence int64     `json:"fence"`
	Until time.Time `json:"until"`
}

// NewLeaseView renders l; withToken is true only where the lease is
// granted.
func NewLeaseView(l ledger.Lease, withToken bool) LeaseView {
	v := LeaseView{Fence: l.Fence, Until: l.Until.UTC()}
	if withToken {
		v.Token = l.Token
	}
	return v
}

// ActionGrant is the 201 of a reservation that hands the effect to its
// caller: the operation, now executing, and the lease that fences the
// caller's owner steps.
type ActionGrant struct {
	Operation View      `json:"operation"`
	Lease     LeaseView `json:"lease"`
}

// ActionReplay is the 200 of a reservation whose operation is final: the
// result its owner (or an operator) recorded, null when none was.
type ActionReplay struct {
	Operation View            `json:"operation"`
	Result    json.RawMessage `json:"result"`
}

// StepAnswer is the 200 of an owner step: the operation after it, and for
// a heartbeat the extended lease (without its token).
type StepAnswer struct {
	Operation View       `json:"operation"`
	Lease     *LeaseView `json:"lease,omitempty"`
}

// OwnerStep is the body of an owner step. Token and Fence are the lease's;
// State, Result and ResultRef belong to complete, Reason to release and
// unknown.
type OwnerStep struct {
	Token     string          `json:"token"`
	Fence     int64           `json:"fence"`
	State     string          `json:"state,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	ResultRef string          `json:"result_ref,omitempty"`
	Reason    string          `json:"reason,omitempty"`
}

// ResultOf is the result recorded on an action's final operation: its
// stored body when that is JSON, null otherwise (an operator's
// resolution without one, an approval denied). A stored body that is not
// JSON (a probe's text answer) is given as a JSON string.
func ResultOf(op *ledger.Operation) json.RawMessage {
	if op.Response == nil || len(op.Response.Body) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(op.Response.Body) {
		return op.Response.Body
	}
	s, _ := json.Marshal(string(op.Response.Body))
	return s
}

// ResultResponse is how a result is stored: the response an action's
// replay reads back (ResultOf).
func ResultResponse(result []byte) *ledger.Response {
	r := &ledger.Response{Status: 200, Header: map[string][]string{"Content-Type": {"application/json"}}}
	if len(result) > 0 {
		r.Body = result
	}
	return r
}
