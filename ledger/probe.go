package ledger

import (
	"time"
)

// ActorReconciler is who resolves an operation on a probe's proof, in its
// history and audit events.
const ActorReconciler = "idemgate:reconciler"

// ProbeClaimParams asks for unknown operations to probe (docs/design.md,
// "Reconciliation"): of the given routes, those due (their next probe's
// time passed) and held by no other reconciler, at most Limit.
type ProbeClaimParams struct {
	Routes []string // the route templates ("POST /v1/x/{id}/capture") that declare a probe
	Limit  int
	// Lease is how long the claim is the claimant's alone: another
	// reconciler may claim the operation once it lapses, and a late answer
	// of the first is then refused (fenced).
	Lease time.Duration
}

// Validate refuses a claim without routes, limit or lease.
func (p ProbeClaimParams) Validate() error {
	switch {
	case len(p.Routes) == 0 || p.Limit <= 0:
		return invalid("a probe claim needs routes and a positive limit")
	case p.Lease < MinDuration:
		return invalid("probe lease %v: want at least %v", p.Lease, MinDuration)
	}
	for _, r := range p.Routes {
		if r == "" || !cleanText(r) {
			return invalid("route must be non-empty UTF-8 text")
		}
	}
	return nil
}

// ProbeLease is a reconciler's claim on one unknown operation: its token
// and fence, as an owner's lease, but on the probe, not on the effect.
type ProbeLease struct {
	OpID   string
	Token  string
	Fence  int64
	Until  time.Time
	Actor  string // who probes, in the history (default ActorReconciler)
	Probes int    // the probes claimed so far, this one included
}

// ProbeClaim is an operation claimed for probing, as it stands.
type ProbeClaim struct {
	Op    *Operation
	Lease ProbeLease
}

// Verdict is what a probe proved.
type Verdict string

// The verdicts of a probe: the write was applied (the operation
// succeeded), it was not (prepared: the next retry runs it), or the probe
// proved nothing and is tried again later.
const (
	Applied      Verdict = "applied"
	NotApplied   Verdict = "not_applied"
	Inconclusive Verdict = "inconclusive"
)

// ProbeOutcome is a probe's result, with its evidence.
type ProbeOutcome struct {
	Verdict Verdict
	// Response is the probe's answer, stored as the replay of an applied
	// operation (marked reconciled).
	Response  *Response
	ResultRef string
	// Evidence is a short account for the history: the probe's status and
	// what was judged ("probe GET … answered 200: applied").
	Evidence string
	// Next is when an inconclusive probe is due again (the caller's
	// backoff).
	Next time.Time
}

// Validate refuses an outcome that a store cannot record as it stands.
func (o ProbeOutcome) Validate() error {
	switch o.Verdict {
	case Applied:
		if o.Response == nil {
			return invalid("an applied probe stores its answer as the replay")
		}
	case NotApplied, Inconclusive:
		if o.Response != nil {
			return invalid("only an applied probe's answer is stored")
		}
	default:
		return invalid("verdict %q: want applied, not_applied or inconclusive", o.Verdict)
	}
	if o.Evidence == "" || !cleanText(o.Evidence) || !cleanText(o.ResultRef) {
		return invalid("a probe's outcome needs its evidence, in UTF-8 text")
	}
	return nil
}

// Target is the state a verdict moves the operation to; Unknown for none.
func (v Verdict) Target() State {
	switch v {
	case Applied:
		return Succeeded
	case NotApplied:
		return Prepared
	}
	return Unknown
}
