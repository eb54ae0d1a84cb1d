package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Resolution is an operator's verdict on an unknown operation
// (docs/design.md, "Reconciliation"), as the control API's body, the web
// page's form and `idemgate ops resolve` give it.
type Resolution struct {
	OperationID string
	// State is "succeeded" or "failed" (the effect is, or is not, there:
	// retries replay that), or "prepared" (proven not applied: the next
	// retry performs it).
	State string
	// Note says what the operator checked; it is audited.
	Note string
	// Response is the upstream's answer, when the operator found it:
	// retries then replay exactly that. Only with succeeded or failed.
	Response *contract.Answer
	// Result is an action's result (JSON), when the operator found it:
	// retries replay it. Only on an action's operation, with succeeded or
	// failed, and not with Response.
	Result json.RawMessage
	// ResultRef is the upstream's reference for the effect.
	ResultRef string
	// Duplicate says the effect was made twice despite the checks (the
	// metric that matters most); the history keeps it, as "duplicate: "
	// before the note.
	Duplicate bool
}

// Resolve settles an unknown operation on an admin's word, recorded in its
// history with the admin's name and note. Only an unknown operation can be
// resolved: another is ErrIllegalTransition, carried by a problem that
// names the state that refused it. A refused resolution changes nothing.
func (o *Operator) Resolve(ctx context.Context, c Caller, r Resolution) (*ledger.Operation, error) {
	if err := o.RequireAdmin(c, "resolving an operation"); err != nil {
		return nil, err
	}
	before, err := o.Operation(ctx, c, r.OperationID)
	if err != nil {
		return nil, err
	}
	p, err := o.resolveParams(c, r, before)
	if err != nil {
		return nil, err
	}
	after, err := o.Store.Resolve(ctx, p)
	if errors.Is(err, ledger.ErrIllegalTransition) {
		return nil, o.notUnknown(ctx, before, err)
	}
	if err != nil {
		return nil, err
	}
	o.wake(after.ID)
	if o.Resolved != nil {
		o.Resolved(before, after, r.Duplicate)
	}
	return after, nil
}

// resolveParams checks a resolution: its state, its note, and the answer
// (one a replay could send as given, within MaxResponse).
func (o *Operator) resolveParams(c Caller, r Resolution, op *ledger.Operation) (ledger.ResolveParams, error) {
	to, err := resolvedState(r.State)
	if err != nil {
		return ledger.ResolveParams{}, err
	}
	if err := checkNote(r.Note, true); err != nil {
		return ledger.ResolveParams{}, err
	}
	if err := checkRef(r.ResultRef); err != nil {
		return ledger.ResolveParams{}, err
	}
	p := ledger.ResolveParams{ID: r.OperationID, To: to, Actor: c.Name, Note: r.Note, ResultRef: r.ResultRef}
	if r.Duplicate {
		p.Note = "duplicate: " + p.Note // the audit log keeps the operator's finding
	}
	if r.Result != nil {
		p.Response, err = o.resolvedResult(r, to, op)
		return p, err
	}
	if r.Response == nil {
		return p, nil
	}
	if !to.Final() {
		return p, invalid("a response can only be stored with succeeded or failed: prepared means nothing was applied")
	}
	if p.Response, err = storedAnswer(*r.Response, o.MaxResponse); err != nil {
		return p, invalid("response: " + err.Error())
	}
	return p, nil
}

// resolvedResult checks an action's result given with a resolution and
// returns it as the answer to store.
func (o *Operator) resolvedResult(r Resolution, to ledger.State, op *ledger.Operation) (*ledger.Response, error) {
	name, isAction := contract.ActionName(op)
	result, err := compactResult(r.Result)
	switch {
	case !isAction:
		return nil, invalid("a result belongs to an action's operation; give this one a response")
	case r.Response != nil:
		return nil, invalid("give a result or a response, not both")
	case !to.Final():
		return nil, invalid("a result can only be stored with succeeded or failed: prepared means nothing was performed")
	case err != nil:
		return nil, err
	case int64(len(result)) > o.action(name).maxResult():
		return nil, tooLarge(len(result), o.action(name).maxResult())
	}
	return contract.ResultResponse(result), nil
}

// notUnknown is the refusal of a resolution of an operation that is not
// unknown, naming the state that refused it, not the one read before.
func (o *Operator) notUnknown(ctx context.Context, op *ledger.Operation, err error) error {
	if now, gerr := o.Store.Get(ctx, op.ID); gerr == nil {
		op = now
	}
	return &refused{Problem: contract.NewProblem(contract.CodeIllegalTransition,
		"only an unknown operation can be resolved; this one is "+string(op.State)).For(op, contract.ControlPrefix),
		cause: err}
}

// refused is a problem that keeps the ledger's error it answers, for
// errors.Is.
type refused struct {
	*contract.Problem
	cause error
}

func (r *refused) Unwrap() []error { return []error{r.Problem, r.cause} }

// EffectResolution is an operator's verdict on an effect that waits for
// one (its attempts used) or whose delivery is unknown: succeeded or
// failed (the effect is, or is not, at its target; the operation's next
// effect then goes out, or not), or prepared (deliver it again now, with
// the same key).
type EffectResolution struct {
	EffectID string
	// Tenant is the effect's; a principal's own tenant is used whatever
	// is given here, so only a local operator names it.
	Tenant    string
	State     string
	Note      string
	ResultRef string
}

// ResolveEffect settles an effect on an admin's word. Only an effect that
// is neither final nor being delivered can be (ErrIllegalTransition).
func (o *Operator) ResolveEffect(ctx context.Context, c Caller, r EffectResolution) (*ledger.Effect, error) {
	if err := o.RequireAdmin(c, "resolving an effect"); err != nil {
		return nil, err
	}
	to, err := resolvedState(r.State)
	if err != nil {
		return nil, err
	}
	if err := checkNote(r.Note, true); err != nil {
		return nil, err
	}
	if err := checkRef(r.ResultRef); err != nil {
		return nil, err
	}
	tenant := r.Tenant
	if !c.Local {
		tenant = c.Tenant
	}
	e, err := o.Store.ResolveEffect(ctx, ledger.EffectResolveParams{ID: r.EffectID, Tenant: tenant, To: to,
		Actor: c.Name, Note: r.Note, ResultRef: r.ResultRef})
	if errors.Is(err, ledger.ErrIllegalTransition) {
		return nil, &refused{Problem: contract.NewProblem(contract.CodeIllegalTransition, "only an effect that is "+
			"neither final nor being delivered can be resolved"), cause: err}
	}
	if err != nil {
		return nil, fmt.Errorf("resolve effect %s: %w", r.EffectID, err)
	}
	return e, nil
}
