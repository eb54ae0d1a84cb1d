package keyed

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Policy is what a route, an action, a tool or a consumer asks of its
// operations: the same for every command it sends.
type Policy struct {
	// Name is the operation's route: the metrics' route label, and the
	// scope of its business and concurrency keys ("POST /v1/tickets",
	// "action:NAME", "mcp:SERVER/TOOL", "consumer:NAME").
	Name string
	// Kind is the surface the operations come from; stored on each.
	Kind ledger.Kind
	// Lease is how long an owner holds an operation between heartbeats
	// (default 30s); Retention how long a final key is remembered
	// (default 24h).
	Lease, Retention time.Duration
	// Resend allows running an unknown operation again, for upstreams that
	// honour the key (they deduplicate the re-sent effect themselves).
	Resend bool
	// Approval, if set, asks a human before the effect of every command
	// its `when` holds for (docs/design.md, "Approvals").
	Approval *approval.Policy
	// MaxAnswer bounds the answer an operation stores (0: no bound). A
	// larger one is given whole to the command that ran the effect, and
	// the operation is recorded with its fate and a stand-in that says so
	// (docs/design.md, "An answer too large to keep").
	MaxAnswer int64
}

// Defaults of a Policy's lease and retention.
const (
	DefaultLease     = 30 * time.Second
	DefaultRetention = 24 * time.Hour
)

func (p *Policy) lease() time.Duration {
	if p.Lease < ledger.MinDuration {
		return DefaultLease
	}
	return p.Lease
}

func (p *Policy) retention() time.Duration {
	if p.Retention < ledger.MinDuration {
		return DefaultRetention
	}
	return p.Retention
}

// Command is one keyed request, read and checked by its adapter: a
// refusal before it changes nothing.
type Command struct {
	Policy *Policy
	// Tenant, Namespace and Key name the operation; Fingerprint is what
	// the key is bound to (package fingerprint: of its meaning, never of
	// its bytes).
	Tenant, Namespace, Key, Fingerprint string
	// BusinessKey and ConcurrencyKey are the command's values at the
	// policy's pointers ("" for none).
	BusinessKey, ConcurrencyKey string
	// Principal is who sends it: its name is recorded, and an approval's
	// policy reads it whole.
	Principal approval.Principal
	// Run and Trace are the agent's run and W3C trace ids; Target what
	// the command does ("POST /v1/tickets/T-7", "ACTION NAME").
	Run, Trace, Target string
	// Probe is the policy's reconciliation probe rendered from this
	// command ("" for none).
	Probe string
	// Rules are the rules Fingerprint was made under, as the adapter
	// writes them ("" for none to keep), kept on a new operation; and
	// Refingerprint, if set, is this command's fingerprint under rules an
	// operation was made under. A key whose operation was made under
	// other rules (a reload changed a route's settings since) is then
	// refused only if the command differs under that operation's own
	// rules: an answered key still replays (docs/design.md, "Fingerprint
	// rules").
	Rules         string
	Refingerprint func(rules string) (string, error)
	// Approval is what a human is shown and a policy reads, required when
	// the policy asks for approvals.
	Approval *ApprovalInput
	// Wait is how long a copy that finds its operation executing (or
	// waiting for a decision) waits for it to end before it is answered
	// as it stands: capped at Options.MaxWait; 0 answers at once.
	Wait time.Duration
}

// ApprovalInput is a command as an approval holds it.
type ApprovalInput struct {
	// Input is what the policy's `when` and `summary` read.
	Input approval.Input
	// Command is the command shown to the approver, as parsed (its
	// canonical form is what the approval keeps).
	Command any
	// Headers are the request's own that an approved run sends again
	// (an HTTP route's); nil for none.
	Headers map[string][]string
	// Target is the target the approver is shown (Command.Target with
	// its query, say).
	Target string
}

// check refuses a command no store should hold: the adapter's mistake,
// not the caller's, so it is internal.
func (c *Command) check() error {
	switch {
	case c.Policy == nil || c.Policy.Name == "":
		return fmt.Errorf("keyed: a command needs a policy with a name")
	case c.Tenant == "" || c.Namespace == "" || c.Key == "" || c.Fingerprint == "":
		return fmt.Errorf("keyed: a command needs a tenant, a namespace, a key and a fingerprint")
	case c.Policy.Approval != nil && c.Approval == nil:
		return fmt.Errorf("keyed: policy %s asks for approvals: the command needs its ApprovalInput", c.Policy.Name)
	}
	return nil
}

func (c *Command) opKey() ledger.OpKey {
	return ledger.OpKey{Tenant: c.Tenant, Namespace: c.Namespace, Key: c.Key}
}

// Admission is what a new operation will hold in the store, as Admit
// hears it before the reservation.
type Admission struct {
	// Bytes estimates what the operation (and its approval) will hold:
	// ledger.OperationHeld and ledger.ApprovalHeld, as the stores' Usage
	// count them once it is there.
	Bytes int64
	// Approval says it opens an approval, pending until someone decides.
	Approval bool
}

// admission is what c's operation, opening apr if set, will hold.
func (c *Command) admission(apr *ledger.ApprovalRequest) Admission {
	context := len(c.Key) + len(c.Namespace) + len(c.Policy.Name) + len(c.Target) + len(c.Fingerprint) +
		len(c.Principal.Name) + len(c.Run) + len(c.Trace)
	// Its probe, rendered already, is counted from the store's next
	// figure, as it always was.
	own := len(c.BusinessKey) + len(c.ConcurrencyKey)
	if apr == nil {
		return Admission{Bytes: ledger.OperationHeld(int64(context), int64(own), 1)}
	}
	texts := len(c.Key) + len(c.Policy.Name) + len(apr.Target) + len(c.Fingerprint) + len(apr.Summary) +
		len(apr.Command) + len(apr.RequestedBy) + len(strings.Join(apr.Approvers, ","))
	return Admission{Bytes: ledger.OperationHeld(int64(context), int64(own), 0) + ledger.ApprovalHeld(int64(texts)),
		Approval: true}
}

// targetBound refuses a command whose target is longer than MaxTarget:
// the target is kept on its operation and copied into each of its audit
// events.
func (x *Executor) targetBound(c *Command) *contract.Problem {
	if len(c.Target) <= x.opts.MaxTarget {
		return nil
	}
	return contract.NewProblem(contract.CodePayloadTooLarge, fmt.Sprintf("the request's target is %d "+
		"bytes, over the %d this gateway records; nothing was reserved", len(c.Target), x.opts.MaxTarget))
}

// commandBound refuses an approval whose command is longer than
// MaxApprovalCommand: it is kept with the approval, and a person has to
// read it to decide.
func (x *Executor) commandBound(apr *ledger.ApprovalRequest) *contract.Problem {
	if apr == nil || len(apr.Command) <= x.opts.MaxApprovalCommand {
		return nil
	}
	return contract.NewProblem(contract.CodePayloadTooLarge, fmt.Sprintf("this request needs an approval, and "+
		"its command is %d bytes, over the %d an approval shows; nothing was reserved", len(apr.Command),
		x.opts.MaxApprovalCommand))
}

// reserveParams is what the ledger is asked to reserve for c.
func (x *Executor) reserveParams(c *Command) ledger.ReserveParams {
	return ledger.ReserveParams{Tenant: c.Tenant, Namespace: c.Namespace, Key: c.Key, Kind: c.Policy.Kind,
		Route: c.Policy.Name, Fingerprint: c.Fingerprint, Lease: c.Policy.lease(), Retention: c.Policy.retention(),
		BusinessKey: c.BusinessKey, ConcurrencyKey: c.ConcurrencyKey, Actor: x.opts.Actor,
		Principal: c.Principal.Name, Target: c.Target, RunID: c.Run, TraceID: c.Trace, Probe: c.Probe,
		FingerprintRules: c.Rules}
}

// detached is ctx without its cancellation, bounded by d: a step that
// must be made whether or not the caller is still there (a reservation
// between its commit and its reply, an outcome its retry must find).
func detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// sameCommand reports whether c is op's command: the same fingerprint,
// or, for an operation made under other rules, the same fingerprint
// under those (c then takes op's fingerprint, for the steps and events
// that follow).
func (c *Command) sameCommand(op *ledger.Operation) bool {
	if op.Fingerprint == c.Fingerprint {
		return true
	}
	if c.Refingerprint == nil || op.FingerprintRules == "" || op.FingerprintRules == c.Rules {
		return false // the same rules, or none recorded (an operation of before they were)
	}
	fp, err := c.Refingerprint(op.FingerprintRules)
	if err != nil || fp != op.Fingerprint {
		return false
	}
	c.Fingerprint = fp
	return true
}
