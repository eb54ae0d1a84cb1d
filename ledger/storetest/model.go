package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idemgate/idemgate/ledger"
)

// modelOp is the model's idea of one operation.
type modelOp struct {
	id       string
	fp       string
	state    ledger.State
	fence    int64
	attempts int
	lapsed   bool           // executing under a lease that has run out
	leases   []ledger.Lease // every lease ever issued, the current one last
	owner    string         // the latest owner's token; cleared by an expiry
	apr      string         // its approval's id, if it was reserved for one
	aprFP    string
	status   ledger.ApprovalStatus
}

// expire is what the lease expiry does to op.
func (op *modelOp) expire() { op.state, op.lapsed, op.owner = ledger.Unknown, false, "" }

// model is a few lines of obvious code that says what the store must do.
type model struct {
	s   ledger.Store
	ops map[ledger.OpKey]*modelOp
}

var (
	// modelKeys are two keys of the clients' namespace, and the first
	// again in a consumer's: another operation, whatever the first does.
	modelKeys = []ledger.OpKey{clientKey("acme", "k1"), clientKey("acme", "k2"),
		{Tenant: "acme", Namespace: ledger.ConsumerNamespace("model"), Key: "k1"}}
	modelFPs = []string{approvalFP, otherFP}
)

// testModel drives random call sequences against the store and the model
// side by side, and compares every operation after every call.
func testModel(t *testing.T, b Backend) {
	rapid.Check(t, func(rt *rapid.T) {
		m := &model{s: b.Fresh(perCheck{t, rt}), ops: map[ledger.OpKey]*modelOp{}}
		rt.Cleanup(func() { m.s.Close() })
		rt.Repeat(map[string]func(*rapid.T){
			"reserve":   m.reserve,
			"acquire":   m.acquire,
			"owner":     m.ownerStep,
			"owner2":    m.ownerStep, // the steps that matter most, drawn twice as often
			"expire":    m.expire,
			"resolve":   m.resolve,
			"deny":      m.deny,
			"approve":   m.approve,
			"heartbeat": m.heartbeat,
			"purge":     m.purge,
			"":          m.check,
		})
	})
}

// perCheck is the test with its cleanups run when one rapid check ends:
// the store a check opens, and its database, are given back before the
// next check, not kept, a hundred of them, until the test ends.
type perCheck struct {
	testing.TB
	rt *rapid.T
}

// Cleanup runs f when the check ends.
func (c perCheck) Cleanup(f func()) { c.rt.Cleanup(f) }

// pick draws one of the operations that exist.
func (m *model) pick(rt *rapid.T) (ledger.OpKey, *modelOp) {
	var keys []ledger.OpKey
	for _, k := range modelKeys {
		if m.ops[k] != nil {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		rt.Skip("no operation yet")
	}
	key := rapid.SampledFrom(keys).Draw(rt, "key")
	return key, m.ops[key]
}

// leaseFor draws a lease duration: long, or one that will have lapsed by the
// next call (the caller waits out a Lapsing lease with settle).
func leaseFor(rt *rapid.T) (lease ledger.ReserveParams, lapsing bool) {
	lapsing = rapid.Bool().Draw(rt, "lapsing")
	if lapsing {
		return ledger.ReserveParams{Lease: Lapsing}, true
	}
	return ledger.ReserveParams{Lease: Long}, false
}

func (m *model) reserve(rt *rapid.T) {
	key := rapid.SampledFrom(modelKeys).Draw(rt, "key")
	fp := rapid.SampledFrom(modelFPs).Draw(rt, "fp")
	leased := rapid.Bool().Draw(rt, "leased")
	p := ledger.ReserveParams{Tenant: key.Tenant, Namespace: key.Namespace, Key: key.Key, Kind: ledger.KindRoute,
		Route: "/r", Fingerprint: fp, Retention: Retention, Actor: "model"}
	if key.Namespace != ledger.NamespaceClients {
		p.Kind = ledger.KindConsumer
	}
	lapsing := false
	if leased {
		var l ledger.ReserveParams
		l, lapsing = leaseFor(rt)
		p.Lease = l.Lease
	}
	if !leased && rapid.Bool().Draw(rt, "approval") {
		p.Approval = ApprovalParams(Long, Long).Approval
	}
	res, err := m.s.Reserve(ctx(rt), p)
	settle(lapsing)
	op := m.ops[key]
	if op == nil {
		if err != nil || !res.Created || res.Op.State != p.State() || res.Owned() != leased ||
			(res.Op.Approval != nil) != (p.Approval != nil) || res.Op.OpKey() != key || res.Op.Kind != p.Kind {
			rt.Fatalf("new reserve: %+v %v", res, err)
		}
		op = &modelOp{id: res.Op.ID, fp: fp, state: p.State(), lapsed: lapsing}
		if p.Approval != nil {
			op.apr, op.aprFP, op.status = res.Op.Approval.ID, fp, ledger.ApprovalPending
		}
		if leased {
			op.fence, op.attempts, op.owner = 1, 1, res.Lease.Token
			op.leases = append(op.leases, *res.Lease)
		}
		m.ops[key] = op
		return
	}
	if op.state == ledger.Executing && op.lapsed {
		op.expire()
	}
	if res.Op == nil || res.Op.ID != op.id || res.Created || res.Owned() || res.Op.OpKey() != key {
		rt.Fatalf("reserve of an existing key: %+v", res)
	}
	if fp != op.fp {
		if !errors.Is(err, ledger.ErrFingerprintMismatch) {
			rt.Fatalf("reserve with another fingerprint: %v", err)
		}
		return
	}
	if err != nil || res.Op.State != op.state {
		rt.Fatalf("reserve of an existing key: state %s, model %s, err %v", res.Op.State, op.state, err)
	}
}

// settle waits until a Lapsing lease has passed on every store's clock, so
// that the model's "lapsed" is the store's too.
func settle(lapsing bool) {
	if lapsing {
		time.Sleep(2 * time.Millisecond)
	}
}

func (m *model) acquire(rt *rapid.T) {
	_, op := m.pick(rt)
	resend := rapid.Bool().Draw(rt, "resend")
	l, lapsing := leaseFor(rt)
	res, err := m.s.Acquire(ctx(rt), ledger.AcquireParams{ID: op.id, Lease: l.Lease, Actor: "model", Resend: resend})
	settle(lapsing)
	legal := (!resend && op.state == ledger.Prepared) || (resend && op.state == ledger.Unknown)
	if !legal {
		expectErr(rt, "acquire from "+string(op.state), err, ledger.ErrIllegalTransition)
		return
	}
	if !resend && op.apr != "" && op.status != ledger.ApprovalApproved && op.status != ledger.ApprovalUsed {
		expectErr(rt, "acquire with the approval "+string(op.status), err, ledger.ErrApprovalRequired)
		return
	}
	if err != nil || res.Lease == nil {
		rt.Fatalf("acquire from %s: %v", op.state, err)
	}
	op.state, op.lapsed, op.owner = ledger.Executing, lapsing, res.Lease.Token
	if !resend && op.status == ledger.ApprovalApproved {
		op.status = ledger.ApprovalUsed
	}
	op.fence++
	op.attempts++
	op.leases = append(op.leases, *res.Lease)
}

// ownerStep ends an operation with any lease it ever had, current or stale.
func (m *model) ownerStep(rt *rapid.T) {
	_, op := m.pick(rt)
	if len(op.leases) == 0 {
		rt.Skip("never leased")
	}
	l := rapid.SampledFrom(op.leases).Draw(rt, "lease")
	step := rapid.SampledFrom([]ledger.Step{ledger.StepComplete, ledger.StepRelease, ledger.StepMarkUnknown}).Draw(rt, "step")
	to := map[ledger.Step]ledger.State{ledger.StepRelease: ledger.Prepared, ledger.StepMarkUnknown: ledger.Unknown}[step]
	if step == ledger.StepComplete {
		to = rapid.SampledFrom([]ledger.State{ledger.Succeeded, ledger.Failed}).Draw(rt, "to")
	}
	got, err := attempt{step: step, to: to}.do(ctx(rt), m.s, &ledger.Operation{ID: op.id}, l)
	if op.state == to && l.Fence == op.fence && l.Token == op.owner {
		if err != nil || got.State != to {
			rt.Fatalf("%s retried by its owner: %v", step, err)
		}
		return // the owner's retry of a step it made: nothing changes
	}
	if op.state.Final() && l.Fence == op.fence && l.Token == op.owner {
		// The lease's own operation, settled otherwise: told so, not that
		// another owner took it; nothing changes.
		expectErr(rt, string(step)+" by the lease it was settled under", err, ledger.ErrSettledOtherwise)
		return
	}
	if op.state != ledger.Executing || l.Fence != op.fence {
		expectErr(rt, string(step)+" by a stale owner", err, ledger.ErrStaleOwner)
		return
	}
	if err != nil || got.State != to {
		rt.Fatalf("%s by the owner: %v", step, err)
	}
	op.state, op.lapsed = to, false
}

func (m *model) heartbeat(rt *rapid.T) {
	_, op := m.pick(rt)
	if len(op.leases) == 0 {
		rt.Skip("never leased")
	}
	l := rapid.SampledFrom(op.leases).Draw(rt, "lease")
	_, err := m.s.Heartbeat(ctx(rt), l, Long)
	if op.state != ledger.Executing || l.Fence != op.fence || op.lapsed {
		expectErr(rt, "heartbeat by a stale owner or of a lapsed lease", err, ledger.ErrStaleOwner)
		return
	}
	if err != nil {
		rt.Fatalf("heartbeat by the owner: %v", err)
	}
}

func (m *model) expire(rt *rapid.T) {
	want := 0
	for _, op := range m.ops {
		if op.state == ledger.Executing && op.lapsed {
			op.expire()
			want++
		}
	}
	n, err := m.s.ExpireLeases(ctx(rt), 100)
	if err != nil || n != want {
		rt.Fatalf("expire: %d, model %d, err %v", n, want, err)
	}
}

// purge never touches anything here: every operation is inside its
// retention, and executing or unknown ones would be kept anyway.
func (m *model) purge(rt *rapid.T) {
	if n, err := m.s.Purge(ctx(rt), 100); err != nil || n != 0 {
		rt.Fatalf("purge inside retention: %d %v", n, err)
	}
}

func (m *model) resolve(rt *rapid.T) {
	_, op := m.pick(rt)
	to := rapid.SampledFrom([]ledger.State{ledger.Succeeded, ledger.Failed, ledger.Prepared}).Draw(rt, "to")
	_, err := m.s.Resolve(ctx(rt), ledger.ResolveParams{ID: op.id, To: to, Actor: "alice", Note: "checked"})
	m.nonOwner(rt, op, ledger.StepResolve, to, err)
}

func (m *model) deny(rt *rapid.T)    { m.decide(rt, ledger.ApprovalDenied) }
func (m *model) approve(rt *rapid.T) { m.decide(rt, ledger.ApprovalApproved) }

// decide approves or denies an operation's approval, with the fingerprint
// it binds or another one.
func (m *model) decide(rt *rapid.T, to ledger.ApprovalStatus) {
	_, op := m.pick(rt)
	if op.apr == "" {
		rt.Skip("no approval")
	}
	d := decision(op.apr)
	d.Fingerprint = rapid.SampledFrom(modelFPs).Draw(rt, "decided fp")
	var err error
	if to == ledger.ApprovalApproved {
		_, err = m.s.Approve(ctx(rt), d)
	} else {
		_, err = m.s.Deny(ctx(rt), d)
	}
	switch {
	case d.Fingerprint != op.aprFP:
		expectErr(rt, "decision on another fingerprint", err, ledger.ErrApprovalMismatch)
	case op.status != ledger.ApprovalPending:
		expectErr(rt, "decision on an approval "+string(op.status), err, ledger.ErrApprovalClosed)
	case err != nil:
		rt.Fatalf("%s a pending approval: %v", to, err)
	default:
		op.status = to
		if to == ledger.ApprovalDenied {
			op.state = ledger.Failed
		}
	}
}

func (m *model) nonOwner(rt *rapid.T, op *modelOp, step ledger.Step, to ledger.State, err error) {
	if ledger.Check(step, op.state, to) != nil {
		expectErr(rt, string(step)+" from "+string(op.state), err, ledger.ErrIllegalTransition)
		return
	}
	if err != nil {
		rt.Fatalf("%s from %s: %v", step, op.state, err)
	}
	op.state = to
}

func (m *model) check(rt *rapid.T) {
	page, err := m.s.List(ctx(rt), ledger.ListParams{Tenant: "acme"})
	if err != nil || len(page.Operations) != len(m.ops) {
		rt.Fatalf("list: %d operations, model %d, err %v", len(page.Operations), len(m.ops), err)
	}
	for key, want := range m.ops {
		got, err := m.s.GetByKey(ctx(rt), key)
		if err != nil {
			rt.Fatalf("get %s: %v", key, err)
		}
		if got.ID != want.id || got.State != want.state || got.Fence != want.fence || got.Attempts != want.attempts ||
			got.Fingerprint != want.fp || got.OpKey() != key {
			rt.Fatalf("%s: store %s fence %d attempts %d; model %s fence %d attempts %d",
				key, got.State, got.Fence, got.Attempts, want.state, want.fence, want.attempts)
		}
		if (got.Approval == nil) != (want.apr == "") || (got.Approval != nil && got.Approval.Status != want.status) {
			rt.Fatalf("%s: approval %+v, model %s %s", key, got.Approval, want.apr, want.status)
		}
		if (got.State == ledger.Executing) == got.LeaseUntil.IsZero() {
			rt.Fatalf("%s: %s with lease_until %v", key, got.State, got.LeaseUntil)
		}
		h, err := m.s.History(ctx(rt), want.id)
		if err != nil || len(h) == 0 || h[len(h)-1].To != want.state ||
			!slices.IsSortedFunc(h, func(a, b ledger.Event) int { return int(a.Seq - b.Seq) }) {
			rt.Fatalf("%s: history %+v ends elsewhere than %s: %v", key, h, want.state, err)
		}
	}
}

func expectErr(rt *rapid.T, what string, err error, kind error) {
	if !errors.Is(err, kind) {
		rt.Fatalf("%s: error %v, want %v", what, err, kind)
	}
}
