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
	{ledger.StepDeny, ledger.Failed},
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
	case ledger.StepDeny:
		return s.Deny(c, ledger.DenyParams{ID: op.ID, Actor: "alice", Reason: "not today",
			Response: &ledger.Response{Status: 403}})
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
	case ledger.StepDeny, ledger.StepResolve:
		return "alice"
	}
	return l.Actor
}

// testLegalTransitions makes every transition of DESIGN.md's table through
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
		if tr.From != ledger.None && tr.Step != ledger.StepExpire && !covered[tr] {
			t.Errorf("transition %+v not exercised", tr)
		}
	}
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
	if want := len(ledger.States)*len(attempts) - 10; tried != want {
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
	_, err = s.Complete(c, ledger.Lease{OpID: "op_nope", Token: "t", Fence: 1}, ledger.Outcome{State: ledger.Succeeded})
	wantErr(t, "complete missing", err, ledger.ErrNotFound)
}
