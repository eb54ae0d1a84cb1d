package control

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// MaxNote bounds a decision's or a resolution's note, in characters.
const MaxNote = 2000

// Operator performs the operator actions, each written once: the JSON
// API, the web page and the CLI call these, so that the role check, the
// tenant's bounds, the duplicate rule and the waking of waiting requests
// are the same whichever face was used. Its refusals are errors that
// contract.ProblemFor maps (a *contract.Problem, or the ledger's).
type Operator struct {
	Store Store
	// AdminRole resolves operations and effects and exports the audit log
	// (default DefaultAdminRole).
	AdminRole string
	// MaxResponse bounds an answer an operator gives with a resolution (the
	// gateway's max_response; 0 is contract.DefaultMaxResponse).
	MaxResponse int64
	// Wake, if set, hears the operation a decision or a resolution
	// changed: the requests waiting on it (Prefer: wait) are woken, where
	// they would otherwise find it by polling.
	Wake func(opID string)
	// Resolved, if set, hears each resolution once it has committed, with
	// the operation before and after it and whether the operator found
	// the effect made twice: the metrics count it.
	Resolved func(before, after *ledger.Operation, duplicate bool)
	// Actions, if set, finds an action's settings by name (its lease, its
	// max_result) for the owner steps and the resolutions of its
	// operations; an action it does not know takes the defaults.
	Actions func(name string) (Action, bool)
	// Approvers, if set, are the roles the running configuration lets
	// decide the approvals of an operation's route (false: none asks for
	// approvals there). A decision needs one of them besides one of the
	// approval's own: a reload that takes a role off a route's approvers
	// applies to the approvals already open.
	Approvers func(route string) ([]string, bool)
	// Operators, if set, says whether the principal name of tenant is
	// one of the gateway's operators (the configuration's operators:),
	// who alone act on the whole gateway (a reload); nil: none is.
	Operators func(name, tenant string) bool
	// Settled, if set, hears each operation an owner step made final,
	// with its stored result: the tenant's budgets count its bytes, and
	// no longer count it live.
	Settled func(op *ledger.Operation)
}

func (o *Operator) adminRole() string {
	if o.AdminRole == "" {
		return DefaultAdminRole
	}
	return o.AdminRole
}

// IsAdmin reports whether c may resolve and export (the web page shows
// what it may do).
func (o *Operator) IsAdmin(c Caller) bool { return c.holds(o.adminRole()) }

// RequireAdmin refuses a caller without the admin role what needs it.
func (o *Operator) RequireAdmin(c Caller, what string) error {
	if o.IsAdmin(c) {
		return nil
	}
	return contract.NewProblem(contract.CodeForbidden, what+" needs the "+o.adminRole()+" role")
}

// RequireOperator refuses what acts on the whole gateway, every
// tenant's (a reload), to a caller the configuration does not name in
// operators: (a local operator, at the store, is one). A tenant's admin
// role is not enough: a tenant, or its identity provider, grants it.
func (o *Operator) RequireOperator(c Caller, what string) error {
	if c.Local || (o.Operators != nil && o.Operators(c.Name, c.Tenant)) {
		return nil
	}
	return contract.NewProblem(contract.CodeForbidden, what+" acts on every tenant: it needs an operator, a "+
		"principal the configuration names in operators:")
}

func (o *Operator) wake(opID string) {
	if o.Wake != nil {
		o.Wake(opID)
	}
}

// Operation reads an operation the caller may see; another tenant's is
// ledger.ErrNotFound.
func (o *Operator) Operation(ctx context.Context, c Caller, id string) (*ledger.Operation, error) {
	op, err := o.Store.Get(ctx, id)
	if err == nil && !c.sees(op.Tenant) {
		return nil, fmt.Errorf("operation %s: %w", id, ledger.ErrNotFound)
	}
	return op, err
}

// Approval reads an approval the caller may see; another tenant's is
// ledger.ErrNotFound.
func (o *Operator) Approval(ctx context.Context, c Caller, id string) (*ledger.Approval, error) {
	a, err := o.Store.GetApproval(ctx, id)
	if err == nil && !c.sees(a.Tenant) {
		return nil, fmt.Errorf("approval %s: %w", id, ledger.ErrNotFound)
	}
	return a, err
}

// View renders an operation whole: its history, its effects in their
// order, and its current approval.
func (o *Operator) View(ctx context.Context, op *ledger.Operation) (contract.View, error) {
	history, err := o.Store.History(ctx, op.ID)
	if err != nil {
		return contract.View{}, err
	}
	effects, err := o.Store.Effects(ctx, op.Tenant, op.Key)
	if err != nil {
		return contract.View{}, err
	}
	v := contract.NewView(op, history).WithEffects(effects)
	if op.Approval == nil {
		return v, nil
	}
	a, err := o.Store.GetApproval(ctx, op.Approval.ID)
	if err != nil {
		return contract.View{}, err
	}
	return v.WithApproval(a), nil
}

// Decision is a decider's verdict on one approval, echoing the
// fingerprint they were shown: a decision is never for another request
// than the one that waits.
type Decision struct {
	ApprovalID  string
	Approve     bool
	Fingerprint string
	Note        string
}

// Decide approves or denies an approval on the caller's word. The store
// checks again, atomically, what the ledger's rule (DecisionParams.Check)
// asks: the tenant, an approver's role, a decider who is not the
// requester, the fingerprint echoed, the time. A decision wakes the
// requests waiting for it.
func (o *Operator) Decide(ctx context.Context, c Caller, d Decision) (*ledger.Approval, error) {
	if err := checkNote(d.Note, false); err != nil {
		return nil, err
	}
	if err := o.checkApprovers(ctx, c, d.ApprovalID); err != nil {
		return nil, err
	}
	p := ledger.DecisionParams{ApprovalID: d.ApprovalID, Tenant: c.Tenant, Fingerprint: d.Fingerprint,
		Actor: c.Name, Roles: c.Roles, Note: d.Note}
	decide := o.Store.Approve
	if !d.Approve {
		decide = o.Store.Deny
	}
	a, err := decide(ctx, p)
	if err != nil {
		return nil, err
	}
	o.wake(a.OpID)
	return a, nil
}

// checkApprovers refuses a decider who holds none of the roles the
// running configuration now lets decide the approval's route: the store
// checks the approval's own list, as it was when it was opened.
func (o *Operator) checkApprovers(ctx context.Context, c Caller, id string) error {
	if o.Approvers == nil || c.Local {
		return nil
	}
	a, err := o.Approval(ctx, c, id)
	if err != nil {
		return err
	}
	roles, ok := o.Approvers(a.Route)
	if !ok || slices.ContainsFunc(roles, c.holds) {
		return nil
	}
	return contract.NewProblem(contract.CodeForbidden, fmt.Sprintf("deciding this approval needs one of the roles "+
		"its route's approvers now lists (%s): the configuration changed since it was opened",
		strings.Join(roles, ", ")))
}

// checkNote bounds a note, and requires one where it is audited.
func checkNote(note string, required bool) error {
	switch {
	case required && note == "":
		return invalid("a note is required: say what you checked (it is audited)")
	case utf8.RuneCountInString(note) > MaxNote:
		return invalid(fmt.Sprintf("the note is longer than %d characters", MaxNote))
	}
	return nil
}

// invalid is a refusal of what was asked, with nothing changed.
func invalid(detail string) error { return contract.NewProblem(contract.CodeInvalidCommand, detail) }

// resolvedState reads a resolution's state: succeeded or failed (the
// effect is there, or is not), or prepared (proven not applied).
func resolvedState(s string) (ledger.State, error) {
	to, err := ledger.ParseState(s)
	if err != nil || (to != ledger.Succeeded && to != ledger.Failed && to != ledger.Prepared) {
		return "", invalid(`state must be "succeeded", "failed" or "prepared" (proven not applied)`)
	}
	return to, nil
}
