// Package idemdbos makes a DBOS step's effect on the outside world an
// idemgate action, keyed by the workflow's id and the step's: a step that
// ran its effect and then lost its process before DBOS checkpointed it is
// run again by recovery, and then gets the recorded result instead of
// performing the effect twice; an effect nobody knows the outcome of is
// kept unknown, and the workflow waits, durably, until a probe or an
// operator settles it.
//
//	sent, err := idemdbos.Run(ctx, gw, idemdbos.Action{Name: "support.reply.send", Command: ticket},
//		func(ctx context.Context) (Sent, error) { return mail.Send(ctx, ticket) })
//
// Run is called in a workflow and runs the effect as one step; Act does
// the same inside a step of your own.
package idemdbos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/ledger"
)

// SettleTopic is the topic a workflow waiting in Run receives on as "look
// again": whoever settles the operation may dbos.Send the workflow any
// string there (its operation's id, say) to end the wait at once.
const SettleTopic = "idemgate.settled"

// Action is the effect a step performs.
type Action struct {
	// Name is the action as the gateway's configuration declares it.
	Name string
	// Command is the effect's parameters (encoding/json): the same key
	// with another command is refused.
	Command any
	// Key, when set, is used instead of the one the workflow and the step
	// make: build it from business identifiers that name this one effect.
	Key string
}

// Options tune Run.
type Options struct {
	// Poll is the time between two looks at an operation Run waits for
	// (default 30 s), unless a message on SettleTopic comes first.
	Poll time.Duration
	// NoWait makes Run return a *Pending error at once instead of waiting.
	NoWait bool
	// Wait is how long a reserve waits for another owner of the key still
	// at work before the step's retry (default 10 s).
	Wait time.Duration
	// Retries bounds the step's retries of "not now" answers (the gateway
	// away or busy; nothing was performed), default 10.
	Retries int
}

// Key is the key of the effect the step whose context ctx is performs:
// the workflow's id and the step's, which recovery gives the step again,
// never an attempt.
func Key(ctx context.Context) (string, error) {
	dctx, ok := ctx.(dbos.Context)
	if !ok {
		return "", errors.New("idemdbos: not a DBOS step's context")
	}
	wf, err := dbos.GetWorkflowID(dctx)
	if err != nil {
		return "", err
	}
	step, err := dbos.GetStepID(dctx)
	if err != nil {
		return "", err
	}
	return client.KeyOf("dbos", wf, strconv.Itoa(step)), nil
}

// Pending is an action that waits for someone: its outcome is unknown
// (Code outcome_unknown) or it needs an approval (ApprovalID).
type Pending struct {
	Action, Key, OperationID, ApprovalID, Code, Reason string
}

func (p *Pending) Error() string {
	return fmt.Sprintf("idemgate: action %s, key %s, operation %s waits (%s): %s", p.Action, p.Key, p.OperationID, p.Code, p.Reason)
}

// Refused is an action the gateway refused for good (Code: a changed
// command under the key, a denied approval, a forbidden action…), or
// whose effect failed definitely (Code "failed", Result what was recorded).
type Refused struct {
	Action, Key, OperationID, Code, Reason string
	Result                                 json.RawMessage
}

func (r *Refused) Error() string {
	return fmt.Sprintf("idemgate: action %s, key %s, operation %s refused (%s): %s", r.Action, r.Key, r.OperationID, r.Code, r.Reason)
}

// attempt is what one step of Run records: DBOS keeps a step's value,
// where an error would come back from a checkpoint as text only.
type attempt struct {
	Key         string          `json:"key"`
	Kind        string          `json:"kind"` // done, wait, refused
	OperationID string          `json:"operation_id,omitempty"`
	ApprovalID  string          `json:"approval_id,omitempty"`
	State       ledger.State    `json:"state,omitempty"`
	Code        string          `json:"code,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
}

// Act, called inside a DBOS step's function with the step's context,
// performs effect as the action a under the step's key (Key), as
// client.Act does: once, its result replayed to a step that runs again.
// An unknown outcome or an approval is a *Pending error, a refusal or a
// definite failure a *Refused; effect's errors are client.Act's
// (client.NotPerformed, client.Failed).
func Act[R any](ctx context.Context, gw *client.Client, a Action, effect func(ctx context.Context) (R, error)) (R, error) {
	at, err := act(ctx, gw, a, 10*time.Second, effect)
	if err != nil {
		return *new(R), err
	}
	return outcome[R](a, at)
}

func act[R any](ctx context.Context, gw *client.Client, a Action, wait time.Duration, effect func(ctx context.Context) (R, error)) (attempt, error) {
	key := a.Key
	if key == "" {
		k, err := Key(ctx)
		if err != nil {
			return attempt{}, err
		}
		key = k
	}
	at := attempt{Key: key}
	cmd, err := json.Marshal(a.Command)
	if err != nil {
		at.Kind, at.Code, at.Reason = "refused", contract.CodeInvalidCommand, err.Error()
		return at, nil
	}
	acted, err := gw.Act(ctx, client.Action{Name: a.Name, Key: key, Command: cmd, Wait: wait},
		func(ctx context.Context) (any, error) { return effect(ctx) })
	if err == nil {
		at.Kind, at.OperationID, at.State, at.Result = "done", acted.OperationID, acted.State, acted.Result
		return at, nil
	}
	n := client.NamesOf(err)
	at.Reason, at.OperationID, at.ApprovalID, at.Code = err.Error(), n.OperationID, n.ApprovalID, n.Code
	switch client.NextStep(err) {
	case client.Retry:
		return at, err // the step's retry: nothing was performed
	case client.Settle, client.Approve:
		at.Kind = "wait"
	default:
		at.Kind = "refused"
	}
	return at, nil
}

// outcome is what a recorded attempt means to the caller.
func outcome[R any](a Action, at attempt) (R, error) {
	var out R
	switch {
	case at.Kind == "wait":
		return out, &Pending{Action: a.Name, Key: at.Key, OperationID: at.OperationID, ApprovalID: at.ApprovalID, Code: at.Code, Reason: at.Reason}
	case at.Kind == "refused":
		return out, &Refused{Action: a.Name, Key: at.Key, OperationID: at.OperationID, Code: at.Code, Reason: at.Reason}
	case at.State == ledger.Failed:
		return out, &Refused{Action: a.Name, Key: at.Key, OperationID: at.OperationID, Code: "failed", Reason: "the effect failed", Result: at.Result}
	}
	if err := json.Unmarshal(at.Result, &out); err != nil {
		return out, &Refused{Action: a.Name, Key: at.Key, OperationID: at.OperationID, Code: "result", Reason: err.Error(), Result: at.Result}
	}
	return out, nil
}

// Run, called in a workflow, performs effect as the action a in one DBOS
// step, keyed by the workflow's id and that step's (or a.Key). When the
// outcome is unknown or an approval is needed it does not perform the
// effect again: it waits, durably (a message on SettleTopic, or a look at
// the operation every Poll), until the operation is settled or the
// approval decided, then runs a new step under the same key, which
// replays what was recorded or runs the approved effect, once.
func Run[R any](ctx dbos.Context, gw *client.Client, a Action, effect func(ctx context.Context) (R, error), opts ...Options) (R, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Poll, o.Wait, o.Retries = cmp.Or(o.Poll, 30*time.Second), cmp.Or(o.Wait, 10*time.Second), cmp.Or(o.Retries, 10)
	pinned := a
	for {
		at, err := dbos.RunAsStep(ctx, func(sctx context.Context) (attempt, error) {
			return act(sctx, gw, pinned, o.Wait, effect)
		}, dbos.WithStepName("idemgate:"+a.Name), dbos.WithStepMaxRetries(o.Retries),
			dbos.WithStepRetryPredicate(func(err error) bool { return client.NextStep(err) == client.Retry }))
		if err != nil {
			return *new(R), err
		}
		out, err := outcome[R](a, at)
		var p *Pending
		if !errors.As(err, &p) || o.NoWait {
			return out, err
		}
		pinned.Key = at.Key // the same effect: its key, whatever step runs it next
		if err := await(ctx, gw, o.Poll, p); err != nil {
			return out, err
		}
	}
}

// await waits until p's operation is no longer unknown, or its approval no
// longer pending: a message on SettleTopic, or every poll, a step that
// reads the operation.
func await(ctx dbos.Context, gw *client.Client, poll time.Duration, p *Pending) error {
	for {
		if _, err := dbos.Recv[string](ctx, SettleTopic, poll); err != nil && !errors.Is(err, dbos.ErrTimeout) {
			return err
		}
		settled, err := dbos.RunAsStep(ctx, func(sctx context.Context) (bool, error) {
			v, err := gw.Operation(sctx, p.OperationID)
			if err != nil {
				return false, err
			}
			if p.ApprovalID != "" {
				return v.Approval == nil || v.Approval.Status != ledger.ApprovalPending, nil
			}
			return v.State != ledger.Unknown, nil
		}, dbos.WithStepName("idemgate:settled?"), dbos.WithStepMaxRetries(10),
			dbos.WithStepRetryPredicate(func(err error) bool { return client.NextStep(err) == client.Retry }))
		if err != nil {
			return err
		}
		if settled {
			return nil
		}
	}
}
