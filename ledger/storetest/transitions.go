package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// attempt is one store call that tries a (step, target) pair on op, using
// lease for owner steps.
type attempt struct {
	step ledger.Step
	to   ledger.State
}

// attempts lists every step with every target it can name. Reserve is left
// out: it only ever creates, and its existing-key behaviour is tested apart.
var attempts = []attempt{
	{ledger.StepAcquire, ledger.Executing},
	{ledger.StepResend, ledger.Executing},
	{ledger.StepComplete, ledger.Succeeded},
	{ledger.StepComplete, ledger.Failed},
	{ledger.StepRelease, ledger.Prepared},
	{ledger.StepMarkUnknown, ledger.Unknown},
	{ledger.StepResolve, ledger.Succeeded},
	{ledger.StepResolve, ledger.Failed},
	{ledger.StepResolve, ledger.Prepared},
}

// do makes the store call for a, and returns the operation it left.
func (a attempt) do(c context.Context, s ledger.Store, op *ledger.Operation, l ledger.Lease) (*ledger.Operation, error) {
	switch a.step {
	case ledger.StepAcquire, ledger.StepResend:
		r, err := s.Acquire(c, ledger.AcquireParams{ID: op.ID, Lease: Long, Actor: "worker-2",
			Reason: "retry", Resend: a.step == ledger.StepResend})
		return r.Op, err
	case ledger.StepComplete:
		return s.Complete(c, l, ledger.Outcome{State: a.to, Response: &ledger.Response{Status: 200}, Reason: "200"})
	case ledger.StepRelease:
		return s.Release(c, l, ledger.Note{Reason: "connection refused", ErrorCode: "dial"})
	case ledger.StepMarkUnknown:
		return s.MarkUnknown(c, l, ledger.Note{Reason: "timeout", ErrorCode: "timeout"})
	case ledger.StepResolve:
		return s.Resolve(c, ledger.ResolveParams{ID: op.ID, To: a.to, Actor: "alice", Note: "checked upstream"})
	}
	return nil, fmt.Errorf("no call for step %s", a.step)
}

func (a attempt) actor(l ledger.Lease) string {
	switch a.step {
	case ledger.StepAcquire, ledger.StepResend:
		return "worker-2"
	case ledger.StepResolve:
		return "alice"
	}
	return l.Actor
}

// testLegalTransitions makes every transition of docs/design.md's table through
// the store and checks the state and the history row it leaves.
func testLegalTransitions(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	covered := map[ledger.Transition]bool{}
	for _, from := range ledger.States {
		for _, a := range attempts {
			if ledger.Check(a.step, from, a.to) != nil {
				continue
			}
			name := fmt.Sprintf("%s %s→%s", a.step, from, a.to)
			op, l := reach(t, s, from)
			before := len(history(t, s, op.ID))
			got, err := a.do(c, s, op, l)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got.State != a.to || get(t, s, op.ID).State != a.to {
				t.Fatalf("%s: state %s", name, got.State)
			}
			h := history(t, s, op.ID)
			last := h[len(h)-1]
			if len(h) != before+1 || last.From != from || last.To != a.to || last.Actor != a.actor(l) || last.At.IsZero() {
				t.Fatalf("%s: history %+v", name, h)
			}
			if (a.to == ledger.Executing) != !got.LeaseUntil.IsZero() {
				t.Fatalf("%s: lease_until %v in state %s", name, got.LeaseUntil, a.to)
			}
			covered[ledger.Transition{From: from, To: a.to, Step: a.step}] = true
		}
	}
	for _, tr := range ledger.Transitions() {
		// Expiry has its own tests, and so have a denial, which needs an
		// approval (see approvals.go), and a completion after a lapse,
		// which needs an expiry (see leases.go).
		own := tr.Step == ledger.StepExpire || tr.Step == ledger.StepDeny || tr.Step == ledger.StepCompleteLapsed
		if tr.From != ledger.None && !own && !covered[tr] {
			t.Errorf("transition %+v not exercised", tr)
		}
	}
}

// testOwnerRetry: an owner whose step committed but whose reply was lost
// retries it with the same lease and is told it happened, with the operation
// as stored; a different step, or any step once another owner has the
// operation, is still refused.
func testOwnerRetry(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	r := reserve(t, s, Params(Long))
	first := &ledger.Response{Status: 201, Body: []byte(`{"id":"T-1"}`)}
	if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: first}); err != nil {
		t.Fatal(err)
	}
	again, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded,
		Response: &ledger.Response{Status: 201, Body: []byte(`{"id":"T-2"}`)}})
	if err != nil || string(again.Response.Body) != `{"id":"T-1"}` {
		t.Fatalf("retried complete: %v, stored %+v", err, again)
	}
	if n := len(history(t, s, r.Op.ID)); n != 2 {
		t.Fatalf("a retried complete wrote history: %d rows", n)
	}
	// Another outcome asked by the same lease: the operation says how it
	// was settled, and nothing changes; another token is a stale owner.
	settled, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Failed, Response: first})
	wantErr(t, "complete retried with another outcome", err, ledger.ErrSettledOtherwise)
	wantErr(t, "complete retried with another outcome", err, ledger.ErrIllegalTransition)
	if errors.Is(err, ledger.ErrStaleOwner) || settled == nil || settled.State != ledger.Succeeded {
		t.Fatalf("complete retried with another outcome: %+v, %v", settled, err)
	}
	if _, err := s.Release(c, *r.Lease, ledger.Note{Reason: "not sent"}); !errors.Is(err, ledger.ErrSettledOtherwise) {
		t.Fatalf("release after this lease's complete: %v", err)
	}
	stranger := *r.Lease
	stranger.Token = ledger.NewToken()
	_, err = s.Complete(c, stranger, ledger.Outcome{State: ledger.Failed, Response: first})
	wantErr(t, "another token's complete", err, ledger.ErrStaleOwner)
	if errors.Is(err, ledger.ErrSettledOtherwise) {
		t.Fatalf("another token told how the operation was settled: %v", err)
	}

	// Marked unknown, swept or resolved, re-sent by another owner: the first
	// owner's retries are stale.
	r = reserve(t, s, Params(Long))
	if _, err := s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "timeout"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "timeout"}); err != nil {
		t.Fatalf("retried mark unknown: %v", err)
	}
	if _, err := s.Acquire(c, ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "w2", Resend: true}); err != nil {
		t.Fatal(err)
	}
	_, err = s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "timeout"})
	wantErr(t, "retry after another owner took over", err, ledger.ErrStaleOwner)

	// An expired lease's owner is not the owner of what the expiry did.
	r = reserve(t, s, Params(Lapsing))
	lapse()
	if n, err := s.ExpireLeases(c, 10); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	_, err = s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "timeout"})
	wantErr(t, "mark unknown after the expiry did", err, ledger.ErrStaleOwner)
}

// testReserveRetry: a reservation repeated with the id and token it chose
// (its reply was lost after the commit) is answered as the one it created,
// with the same lease, once; anyone else's reservation of the key, or a
// repeat once the operation has moved on, is an existing operation.
func testReserveRetry(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	for _, lease := range []time.Duration{Long, 0} {
		p := Params(lease)
		p.ID, p.Token = ledger.NewID(), ledger.NewToken()
		first := reserve(t, s, p)
		again := anyReserve(t, s, p)
		if !again.Created || again.Op.ID != p.ID || (lease > 0) != (again.Lease != nil) ||
			(lease > 0 && *again.Lease != *first.Lease) {
			t.Fatalf("lease %v: a repeated reservation: %+v, first %+v", lease, again, first)
		}
		if n := len(history(t, s, p.ID)); n != 1 {
			t.Fatalf("lease %v: a repeated reservation wrote history: %d rows", lease, n)
		}
		other := p
		other.ID, other.Token = ledger.NewID(), ledger.NewToken()
		if r := anyReserve(t, s, other); r.Created || r.Lease != nil || r.Op.ID != p.ID {
			t.Fatalf("lease %v: another reservation of the key: %+v", lease, r)
		}
		stolen := p
		stolen.Token = ledger.NewToken()
		if r := anyReserve(t, s, stolen); lease > 0 && (r.Created || r.Lease != nil) {
			t.Fatalf("the id with another token: %+v", r)
		}
	}
	p := Params(Long)
	p.ID, p.Token = ledger.NewID(), ledger.NewToken()
	r := reserve(t, s, p)
	if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded,
		Response: &ledger.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	if again := anyReserve(t, s, p); again.Created || again.Lease != nil || again.Op.State != ledger.Succeeded {
		t.Fatalf("a repeat once the operation has completed: %+v", again)
	}
	bad := Params(Long)
	bad.ID = ledger.NewID()
	_, err := s.Reserve(c, bad)
	wantErr(t, "an id without a token", err, ledger.ErrInvalid)
}

// anyReserve reserves p, created or not.
func anyReserve(tb testing.TB, s ledger.Store, p ledger.ReserveParams) ledger.Reservation {
	tb.Helper()
	r, err := s.Reserve(ctx(tb), p)
	if err != nil {
		tb.Fatalf("reserve: %v", err)
	}
	return r
}

// testIllegalTransitions tries every other (state, step, target) and checks
// that each is an error and changes nothing.
func testIllegalTransitions(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	tried := 0
	for _, from := range ledger.States {
		for _, a := range attempts {
			if ledger.Check(a.step, from, a.to) == nil {
				continue
			}
			tried++
			name := fmt.Sprintf("%s %s→%s", a.step, from, a.to)
			op, l := reach(t, s, from)
			// Not the owner's own token: the owner's retry of a step it
			// already made succeeds (see testOwnerRetry).
			l.Token = ledger.NewToken()
			before := get(t, s, op.ID)
			hist := len(history(t, s, op.ID))
			_, err := a.do(c, s, op, l)
			wantErr(t, name, err, ledger.ErrIllegalTransition)
			var te *ledger.TransitionError
			if !errors.As(err, &te) || te.From != from || te.Step != a.step {
				t.Fatalf("%s: error %q does not name the transition", name, err)
			}
			after := get(t, s, op.ID)
			if after.State != from || after.Fence != before.Fence || after.Attempts != before.Attempts ||
				!after.UpdatedAt.Equal(before.UpdatedAt) || len(history(t, s, op.ID)) != hist {
				t.Fatalf("%s: refused call changed the operation", name)
			}
		}
	}
	if want := len(ledger.States)*len(attempts) - 9; tried != want {
		t.Fatalf("tried %d illegal transitions, want %d", tried, want)
	}
	// The lease sweep leaves every state but a lapsed executing one alone.
	for _, st := range ledger.States {
		reach(t, s, st)
	}
	if n, err := s.ExpireLeases(c, 100); err != nil || n != 0 {
		t.Fatalf("expire with no lapsed lease: %d %v", n, err)
	}
	// Acquire on an operation that does not exist.
	_, err := s.Acquire(c, ledger.AcquireParams{ID: "op_nope", Lease: time.Second, Actor: "w"})
	wantErr(t, "acquire missing", err, ledger.ErrNotFound)
	_, err = s.Complete(c, ledger.Lease{OpID: "op_nope", Token: "t", Fence: 1},
		ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 200}})
	wantErr(t, "complete missing", err, ledger.ErrNotFound)
}
