package idemtemporal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/ledger"
)

// The types of the application errors Perform returns: a workflow tells
// them apart with temporal.ApplicationError's Type, and reads a Pending
// from the details of the first two (PendingOf).
const (
	// TypeOutcomeUnknown: the effect may have happened and nobody knows;
	// not retryable. Wait until a probe or an operator settles it.
	TypeOutcomeUnknown = "IdemgateOutcomeUnknown"
	// TypeApprovalRequired: a human must approve the action first; not
	// retryable. Wait for the decision.
	TypeApprovalRequired = "IdemgateApprovalRequired"
	// TypeRefused: the gateway refused the action for good (a changed
	// command under the key, a denied approval, a forbidden or unknown
	// action); not retryable. Pending.Code says which.
	TypeRefused = "IdemgateRefused"
	// TypeFailed: the effect failed definitely, now or before (its result
	// is the error's Pending.Result); not retryable.
	TypeFailed = "IdemgateFailed"
	// TypeNotNow: nothing was performed, or nothing changed (the gateway
	// was away, busy, or another attempt holds the effect); retryable.
	TypeNotNow = "IdemgateNotNow"
)

// Action is the effect an activity performs.
type Action struct {
	// Name is the action as the gateway's configuration declares it.
	Name string
	// Command is the effect's parameters (encoding/json): the same key
	// with another command is refused.
	Command any
	// Key, when set, is used instead of the key the activity's identity
	// makes: build it from business identifiers that name this one effect.
	Key string
}

// Pending is what a workflow needs to wait for an action: the details of
// Perform's application errors.
type Pending struct {
	Action      string          `json:"action"`
	Key         string          `json:"key"`
	OperationID string          `json:"operation_id,omitempty"`
	ApprovalID  string          `json:"approval_id,omitempty"`
	Code        string          `json:"code,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
}

// ErrNoInterceptor is Perform called without NewInterceptor on the worker
// that runs the activity, or on the one that runs its workflow: the key's
// scope is not known, and guessing could make two effects one.
var ErrNoInterceptor = errors.New("idemtemporal: the worker's interceptors lack idemtemporal.NewInterceptor (on the workflow's worker and the activity's)")

// Key is the key of the effect the current activity performs: the
// workflow's namespace, its id, the run's scope (see Scope) and the
// activity's id, never its attempt, so that every attempt of the activity
// meets the same operation.
func Key(ctx context.Context) (string, error) {
	s, ok := ctx.Value(ctxKey{}).(scoped)
	if !ok || !s.ok {
		return "", ErrNoInterceptor
	}
	info := activity.GetInfo(ctx)
	return client.KeyOf("temporal", info.Namespace, info.WorkflowExecution.ID, s.scope, info.ActivityID), nil
}

// Perform, called in an activity, performs effect as the action a under
// the activity's key (Key). The attempt that owns the operation runs
// effect, under a lease the gateway's heartbeats keep, and records its
// result; an attempt that finds it done returns that result, decoded into
// R, without running effect. effect's errors are Act's: return
// client.NotPerformed(err) when the effect surely did not happen (the
// attempt is retried and runs it), client.Failed(result) for a definite
// failure; any other error records the outcome unknown. The errors
// Perform returns are application errors of the types above.
func Perform[R any](ctx context.Context, a Action, effect func(ctx context.Context) (R, error)) (R, error) {
	var zero R
	s, _ := ctx.Value(ctxKey{}).(scoped)
	key := a.Key
	if key == "" {
		k, err := Key(ctx)
		if err != nil {
			return zero, temporal.NewNonRetryableApplicationError(err.Error(), TypeRefused, err, Pending{Action: a.Name, Code: "no_interceptor"})
		}
		key = k
	}
	if s.w == nil {
		return zero, temporal.NewNonRetryableApplicationError(ErrNoInterceptor.Error(), TypeRefused, ErrNoInterceptor, Pending{Action: a.Name, Key: key, Code: "no_interceptor"})
	}
	cmd, err := json.Marshal(a.Command)
	if err != nil {
		return zero, temporal.NewNonRetryableApplicationError("the command is not JSON", TypeRefused, err, Pending{Action: a.Name, Key: key, Code: contract.CodeInvalidCommand})
	}
	acted, err := s.w.gw.Act(ctx, client.Action{Name: a.Name, Key: key, Command: cmd, Wait: s.w.opts.Wait},
		func(ctx context.Context) (any, error) { return effect(ctx) })
	if err != nil {
		return zero, asTemporal(a.Name, key, err)
	}
	p := Pending{Action: a.Name, Key: key, OperationID: acted.OperationID, Result: acted.Result}
	if acted.State == ledger.Failed {
		return zero, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("idemgate: action %s (operation %s, key %s) failed", a.Name, acted.OperationID, key), TypeFailed, nil, p)
	}
	var out R
	if err := json.Unmarshal(acted.Result, &out); err != nil {
		return zero, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("idemgate: the result recorded for operation %s does not decode: %v", acted.OperationID, err), TypeRefused, err, p)
	}
	return out, nil
}

// asTemporal is the application error an Act error becomes: the type the
// workflow branches on, the operation named in the message and in the
// details.
func asTemporal(action, key string, err error) error {
	n := client.NamesOf(err)
	p := Pending{Action: action, Key: key, Reason: err.Error(), OperationID: n.OperationID, ApprovalID: n.ApprovalID, Code: n.Code}
	msg := fmt.Sprintf("idemgate: action %s, key %s, operation %s: %v", action, key, p.OperationID, err)
	switch client.NextStep(err) {
	case client.Settle:
		return temporal.NewNonRetryableApplicationError(msg, TypeOutcomeUnknown, err, p)
	case client.Approve:
		return temporal.NewNonRetryableApplicationError(msg, TypeApprovalRequired, err, p)
	case client.Retry:
		return temporal.NewApplicationErrorWithCause(msg, TypeNotNow, err, p)
	}
	return temporal.NewNonRetryableApplicationError(msg, TypeRefused, err, p)
}

// PendingOf reads the Pending of an error Perform returned, as the
// workflow gets it (wrapped in an ActivityError); ok is false for any
// other error.
func PendingOf(err error) (p Pending, errType string, ok bool) {
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		return Pending{}, "", false
	}
	switch ae.Type() {
	case TypeOutcomeUnknown, TypeApprovalRequired, TypeRefused, TypeFailed, TypeNotNow:
	default:
		return Pending{}, "", false
	}
	if ae.HasDetails() {
		_ = ae.Details(&p)
	}
	return p, ae.Type(), true
}
