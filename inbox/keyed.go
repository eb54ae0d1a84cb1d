package inbox

import (
	"context"
	"fmt"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// Send performs a message's effect (its delivery to the consumer's
// target) under the lease run holds: the target's answer and its fate,
// or contract.NotSent / contract.NoAnswer when no answer came.
type Send func(ctx context.Context, run *keyed.Run, d Delivery) (keyed.Outcome, error)

// Keyed is a consumer's Deliverer on the keyed executor
// (docs/design.md, "Inbox: messages and webhooks"): each message a
// command of the consumer's tenant, in the consumer's own namespace
// (ledger.ConsumerNamespace), keyed by its identity and fingerprinted by
// its body, its effect Send. The executor's result is the outcome: no
// response is written and nothing is read back.
type Keyed struct {
	Executor *keyed.Executor
	// Name and Tenant are the consumer's: its principal is "consumer:"+Name.
	Name, Tenant string
	// Policy is its operations' (Name "consumer:NAME", Kind consumer, and
	// its lease, retention and resend).
	Policy *keyed.Policy
	// Method is the delivery's method, which the command's fingerprint
	// binds with the body (FingerprintRoute).
	Method string
	// Target is what each message does, for the audit log ("POST
	// /v1/invoices").
	Target string
	// MaxBody bounds a message's body (default contract.DefaultMaxBody).
	MaxBody int64
	// Rate, if set, applies the tenant's request rate: a problem refuses
	// the message for now, nothing reserved (it is delivered again).
	Rate func(tenant string) *contract.Problem
	Send Send
}

// FingerprintRoute is the route a consumer's messages are fingerprinted
// under, with their method and body: the same for a message before and
// after an upgrade, so that its key replays.
func FingerprintRoute(name string) string { return "/_idem/consumers/" + name }

// Deliver implements Deliverer.
func (k *Keyed) Deliver(ctx context.Context, d Delivery) (Outcome, error) {
	if k.Rate != nil {
		if p := k.Rate(k.Tenant); p != nil {
			return Outcome{Code: p.Code}, nil
		}
	}
	cmd, p := k.command(d)
	if p != nil {
		return Outcome{Code: p.Code}, nil
	}
	res, err := k.Executor.Execute(ctx, cmd, func(ctx context.Context, run *keyed.Run) (keyed.Outcome, error) {
		return k.Send(ctx, run, d)
	})
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{State: res.State, Code: res.Code(), Replayed: res.Replayed}
	if res.Op != nil {
		out.OpID = res.Op.ID
	}
	return out, nil
}

// command is d as the executor takes it; a problem refuses it with
// nothing reserved (its code says why it is parked).
func (k *Keyed) command(d Delivery) (*keyed.Command, *contract.Problem) {
	key, err := contract.ParseKey(d.Key)
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidKey, err.Error())
	}
	limit := k.MaxBody
	if limit <= 0 {
		limit = contract.DefaultMaxBody
	}
	if int64(len(d.Body)) > limit {
		return nil, contract.ProblemFor(fmt.Errorf("%w: body of %d bytes, limit %d", fingerprint.ErrTooLarge,
			len(d.Body), limit))
	}
	ct := d.ContentType
	if ct == "" {
		ct = "application/json"
	}
	cmd, err := fingerprint.ParseBody(ct, d.Body, fingerprint.BodyOptions{Limits: fingerprint.Limits{MaxBytes: int(limit)}})
	if err != nil {
		return nil, contract.ProblemFor(err)
	}
	fp, err := fingerprint.Of(fingerprint.Request{Method: k.Method, Route: FingerprintRoute(k.Name), Tenant: k.Tenant,
		Command: cmd})
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidCommand, err.Error())
	}
	return &keyed.Command{Policy: k.Policy, Tenant: k.Tenant, Namespace: ledger.ConsumerNamespace(k.Name), Key: key,
		Fingerprint: fp, Principal: approval.Principal{Name: "consumer:" + k.Name, Tenant: k.Tenant},
		Target: k.Target}, nil
}
