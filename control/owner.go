package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Action is what the owner steps need of an action's configuration
// (docs/design.md, "Actions").
type Action struct {
	// Lease is how far a heartbeat extends the lease.
	Lease time.Duration
	// MaxResult bounds a recorded result, in bytes (0:
	// contract.DefaultMaxResult).
	MaxResult int64
}

func (a Action) maxResult() int64 {
	if a.MaxResult > 0 {
		return a.MaxResult
	}
	return contract.DefaultMaxResult
}

// defaultAction is an action no longer configured: its operations can
// still be ended by their owners, within the defaults.
var defaultAction = Action{Lease: 30 * time.Second}

// Step is one owner step on an action's operation: what the caller sent,
// and which step.
type Step struct {
	OperationID string
	Name        string // contract.StepComplete, StepHeartbeat, StepRelease or StepUnknown
	contract.OwnerStep
}

// Owned is an operation after an owner step, with the lease a heartbeat
// extended.
type Owned struct {
	Op    *ledger.Operation
	Lease *ledger.Lease
}

// Step makes an owner step for the caller, fenced by the lease it holds:
// the store refuses a token or fence that no longer holds the lease
// (ledger.ErrStaleOwner, answered 409 lease_lost), and changes nothing
// then. Another tenant's operation, or one that is not an action's, is
// not found. A step the store made already with this lease (a reply the
// caller lost) answers as made.
func (o *Operator) Step(ctx context.Context, c Caller, s Step) (Owned, error) {
	op, action, err := o.actionOperation(ctx, c, s.OperationID)
	if err != nil {
		return Owned{}, err
	}
	return o.stepOn(ctx, c, s, op, action)
}

// stepOn is Step on op, the action's operation as the caller read it
// (actionOperation) just before: the HTTP handler reads it once, for the
// body's bound and for the step.
func (o *Operator) stepOn(ctx context.Context, c Caller, s Step, op *ledger.Operation, action Action) (Owned, error) {
	var err error
	if err := checkStep(s, action); err != nil {
		return Owned{}, err
	}
	l := ledger.Lease{OpID: op.ID, Token: s.Token, Fence: s.Fence, Actor: c.Name}
	var out Owned
	switch s.Name {
	case contract.StepHeartbeat:
		next, herr := o.Store.Heartbeat(ctx, l, action.Lease)
		if herr != nil {
			return Owned{}, herr
		}
		out.Lease = &next
		out.Op, err = o.Store.Get(ctx, op.ID)
	case contract.StepComplete:
		out.Op, err = o.Store.Complete(ctx, l, completion(s))
	case contract.StepRelease:
		out.Op, err = o.Store.Release(ctx, l, ledger.Note{Reason: "not performed: " + s.Reason, ErrorCode: "released"})
	case contract.StepUnknown:
		out.Op, err = o.Store.MarkUnknown(ctx, l, ledger.Note{Reason: "the owner says: " + s.Reason, ErrorCode: "owner_unknown"})
	}
	if err != nil {
		return Owned{}, o.settledOtherwise(ctx, s, op.ID, err)
	}
	if s.Name == contract.StepComplete && repeated(op) {
		if err := o.completedOtherwise(ctx, s, op.ID); err != nil {
			return Owned{}, err
		}
	}
	if s.Name != contract.StepHeartbeat {
		o.wake(op.ID)
		if o.Settled != nil && out.Op.State.Final() && !repeated(op) {
			o.Settled(out.Op)
		}
	}
	return out, nil
}

// settledOtherwise says, for a step the store refused because this very
// lease had settled the operation otherwise (ledger.ErrSettledOtherwise),
// what it was settled as: a conflict, not a lost lease; err otherwise.
func (o *Operator) settledOtherwise(ctx context.Context, s Step, id string, err error) error {
	if !errors.Is(err, ledger.ErrSettledOtherwise) {
		return err
	}
	state := "settled"
	if op, gerr := o.Store.Get(ctx, id); gerr == nil {
		state = string(op.State)
	}
	asked := s.Name
	if s.State != "" {
		asked += " as " + s.State
	}
	return &refused{Problem: contract.NewProblem(contract.CodeIllegalTransition, fmt.Sprintf("the operation is %s "+
		"already, settled under this lease; %s changes nothing, and nothing was changed", state, asked)), cause: err}
}

// completedOtherwise refuses a complete repeated with the state it
// recorded but another result or result_ref: the store answers such a
// repeat as made (a reply the owner lost), and the first result stands;
// the caller hears that its second one was not recorded, and what differs.
func (o *Operator) completedOtherwise(ctx context.Context, s Step, id string) error {
	op, err := o.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	var stored []byte
	if op.Response != nil {
		stored = op.Response.Body
	}
	var differ []string
	if !bytes.Equal(stored, completion(s).Response.Body) {
		differ = append(differ, "result")
	}
	if op.ResultRef != s.ResultRef {
		differ = append(differ, "result_ref")
	}
	if len(differ) == 0 {
		return nil
	}
	return contract.NewProblem(contract.CodeIllegalTransition, fmt.Sprintf("this lease completed the operation "+
		"already (%s) with another %s; the first stands, and nothing was changed", op.State,
		strings.Join(differ, " and ")))
}

// repeated reports whether the operation was final before the step: a
// step repeated after its reply was lost, which the store answered as
// made, and which must not count it out of the budgets twice.
func repeated(before *ledger.Operation) bool { return before.State.Final() }

// actionOperation reads an action's operation the caller may see, and its
// action's settings.
func (o *Operator) actionOperation(ctx context.Context, c Caller, id string) (*ledger.Operation, Action, error) {
	op, err := o.Operation(ctx, c, id)
	if err != nil {
		return nil, Action{}, err
	}
	name, ok := contract.ActionName(op)
	if !ok {
		return nil, Action{}, fmt.Errorf("operation %s is not an action's: %w", id, ledger.ErrNotFound)
	}
	return op, o.action(name), nil
}

// action is a configured action's settings, or the defaults.
func (o *Operator) action(name string) Action {
	if o.Actions != nil {
		if a, ok := o.Actions(name); ok {
			if a.Lease <= 0 {
				a.Lease = defaultAction.Lease
			}
			return a
		}
	}
	return defaultAction
}

// checkStep refuses a step whose body does not belong to it: without
// its lease, a complete without a final state, a result too large, a
// member of another step.
func checkStep(s Step, a Action) error {
	isComplete := s.Name == contract.StepComplete
	switch {
	case s.Token == "" || s.Fence <= 0:
		return invalid("an owner step needs its lease's token and fence, as the reservation gave them")
	case isComplete && s.State != string(ledger.Succeeded) && s.State != string(ledger.Failed):
		return invalid(`complete needs "state": "succeeded" or "failed"`)
	case !isComplete && (s.State != "" || s.Result != nil || s.ResultRef != ""):
		return invalid(s.Name + " takes no state, result or result_ref: those belong to complete")
	case s.Name == contract.StepHeartbeat && s.Reason != "":
		return invalid("heartbeat takes no reason")
	case int64(len(s.Result)) > a.maxResult():
		return tooLarge(len(s.Result), a.maxResult())
	case checkNote(s.Reason, false) != nil:
		return checkNote(s.Reason, false)
	}
	return checkRef(s.ResultRef)
}

// MaxResultRef bounds a result_ref, in bytes: a ticket's or a message's
// id, as the gateway keeps from an upstream's answer (a longer one it
// drops).
const MaxResultRef = 255

// checkRef refuses a result_ref that is not a short reference: over
// MaxResultRef bytes, not UTF-8, or holding a character that is not
// printable (a newline, an escape), which would forge lines in a log or
// colours in a terminal that shows it.
func checkRef(ref string) error {
	switch {
	case len(ref) > MaxResultRef:
		return invalid(fmt.Sprintf("result_ref of %d bytes: a reference is at most %d (an id, not the result)",
			len(ref), MaxResultRef))
	case !utf8.ValidString(ref) || strings.IndexFunc(ref, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return invalid("result_ref holds a character that is not printable (a newline, a control character)")
	}
	return nil
}

// tooLarge refuses a result over the action's max_result.
func tooLarge(n int, max int64) error {
	return contract.NewProblem(contract.CodePayloadTooLarge, fmt.Sprintf("result of %d bytes: over this action's "+
		"max_result (%d); record a reference (result_ref) instead", n, max))
}

// completion is the outcome a complete records: the result as the
// stored answer every retry replays.
func completion(s Step) ledger.Outcome {
	out := ledger.Outcome{State: ledger.State(s.State), Response: contract.ResultResponse(s.Result),
		ResultRef: s.ResultRef, Reason: "completed by its owner"}
	if out.State == ledger.Failed {
		out.ErrorCode = "owner_failed"
	}
	return out
}

// compactResult checks that a result is JSON and keeps it compact; JSON
// null counts as none.
func compactResult(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, invalid("result: not JSON: " + err.Error())
	}
	if b.String() == "null" {
		return nil, nil
	}
	return b.Bytes(), nil
}

// step answers POST /operations/{id}/{step}: an owner step, then the
// operation whole (and a heartbeat's new lease, without its token).
func (a *API) step(name string) handler {
	return func(w http.ResponseWriter, r *http.Request, c Caller) {
		id := r.PathValue("id")
		op, action, err := a.op.actionOperation(r.Context(), c, id)
		if err != nil {
			fail(w, err, "action operation")
			return
		}
		s := Step{OperationID: id, Name: name}
		if err := decodeStrict(w, r, &s.OwnerStep, action.maxResult()+64<<10); err != nil {
			stepBodyRefused(w, err, action.maxResult())
			return
		}
		if s.Result, err = compactResult(s.Result); err != nil {
			fail(w, err, "")
			return
		}
		out, err := a.op.stepOn(r.Context(), c, s, op, action)
		if err != nil {
			p := contract.ProblemFor(err)
			if p.Code == contract.CodeLeaseLost {
				p.OperationID = id // the owner lost this one: its client names it, retries nothing
			}
			fail(w, p, "action operation")
			return
		}
		// The operation and its history: an action's operation has no
		// effects, and its approval is the reservation's business, so the
		// owner's hot path reads once, not three times.
		history, err := a.op.Store.History(r.Context(), out.Op.ID)
		if err != nil {
			fail(w, err, "")
			return
		}
		ans := contract.StepAnswer{Operation: contract.NewView(out.Op, history)}
		if out.Lease != nil {
			lv := contract.NewLeaseView(*out.Lease, false)
			ans.Lease = &lv
		}
		writeJSON(w, http.StatusOK, ans)
	}
}

// stepBodyRefused answers a step body that could not be read: over the
// limit (413), or not the step's JSON (422).
func stepBodyRefused(w http.ResponseWriter, err error, max int64) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		contract.NewProblem(contract.CodePayloadTooLarge, fmt.Sprintf("body over %d bytes: the result is over this "+
			"action's max_result (%d)", tooBig.Limit, max)).Write(w)
		return
	}
	contract.NewProblem(contract.CodeInvalidCommand, "body: "+err.Error()).Write(w)
}
