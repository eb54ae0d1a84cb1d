package ledger_test

import (
	"errors"
	"sort"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// TestTransitionTable pins docs/design.md's table: these fifteen moves and no
// others. Changing the state machine must change this test on purpose.
func TestTransitionTable(t *testing.T) {
	want := map[ledger.Transition]bool{
		{From: ledger.None, To: ledger.Executing, Step: ledger.StepReserve}:        true,
		{From: ledger.None, To: ledger.Prepared, Step: ledger.StepReserve}:         true,
		{From: ledger.Prepared, To: ledger.Executing, Step: ledger.StepAcquire}:    true,
		{From: ledger.Prepared, To: ledger.Failed, Step: ledger.StepDeny}:          true,
		{From: ledger.Executing, To: ledger.Succeeded, Step: ledger.StepComplete}:  true,
		{From: ledger.Executing, To: ledger.Failed, Step: ledger.StepComplete}:     true,
		{From: ledger.Executing, To: ledger.Prepared, Step: ledger.StepRelease}:    true,
		{From: ledger.Executing, To: ledger.Unknown, Step: ledger.StepMarkUnknown}: true,
		{From: ledger.Executing, To: ledger.Unknown, Step: ledger.StepExpire}:      true,
		{From: ledger.Unknown, To: ledger.Succeeded, Step: ledger.StepResolve}:     true,
		{From: ledger.Unknown, To: ledger.Failed, Step: ledger.StepResolve}:        true,
		{From: ledger.Unknown, To: ledger.Prepared, Step: ledger.StepResolve}:      true,
		{From: ledger.Unknown, To: ledger.Executing, Step: ledger.StepResend}:      true,
		// The owner's completion after a lapse it could not prevent (the
		// store was away), before anyone else has moved the operation.
		{From: ledger.Unknown, To: ledger.Succeeded, Step: ledger.StepCompleteLapsed}: true,
		{From: ledger.Unknown, To: ledger.Failed, Step: ledger.StepCompleteLapsed}:    true,
	}
	got := ledger.Transitions()
	if len(got) != len(want) {
		t.Fatalf("%d transitions, want %d", len(got), len(want))
	}
	steps := []ledger.Step{ledger.StepReserve, ledger.StepAcquire, ledger.StepResend, ledger.StepDeny,
		ledger.StepComplete, ledger.StepRelease, ledger.StepMarkUnknown, ledger.StepExpire, ledger.StepResolve, ledger.StepCompleteLapsed}
	all := append([]ledger.State{ledger.None}, ledger.States...)
	for _, step := range steps {
		for _, from := range all {
			for _, to := range all {
				tr := ledger.Transition{From: from, To: to, Step: step}
				err := ledger.Check(step, from, to)
				if want[tr] != (err == nil) {
					t.Errorf("Check(%s, %s, %s) = %v", step, from, to, err)
				}
				if err != nil && !errors.Is(err, ledger.ErrIllegalTransition) {
					t.Errorf("Check error %v is not ErrIllegalTransition", err)
				}
			}
		}
	}
	// Stores write the history's "from" from Source: one per (step, target).
	for tr := range want {
		if tr.Step == ledger.StepReserve {
			continue
		}
		if from, err := ledger.Source(tr.Step, tr.To); err != nil || from != tr.From {
			t.Errorf("Source(%s, %s) = %s, %v", tr.Step, tr.To, from, err)
		}
	}
	if _, err := ledger.Source(ledger.StepComplete, ledger.Prepared); !errors.Is(err, ledger.ErrIllegalTransition) {
		t.Errorf("Source of an impossible target: %v", err)
	}
}

func TestStates(t *testing.T) {
	for _, s := range ledger.States {
		if got, err := ledger.ParseState(string(s)); err != nil || got != s {
			t.Errorf("ParseState(%s): %v", s, err)
		}
		if s.Final() != (s == ledger.Succeeded || s == ledger.Failed) {
			t.Errorf("%s.Final() = %v", s, s.Final())
		}
	}
	if _, err := ledger.ParseState("done"); err == nil {
		t.Error("ParseState accepted done")
	}
}

func TestIDsAreOrderedAndTokensRandom(t *testing.T) {
	var ids []string
	tokens := map[string]bool{}
	for range 1000 {
		ids = append(ids, ledger.NewID())
		tokens[ledger.NewToken()] = true
	}
	if !sort.StringsAreSorted(ids) {
		t.Error("ids made one after another are not in order")
	}
	if len(tokens) != 1000 || len(ledger.NewToken()) != 32 {
		t.Error("owner tokens repeat or are not 128 bits")
	}
}

func TestNewPage(t *testing.T) {
	ops := []*ledger.Operation{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	if p := ledger.NewPage(ops, 3); p.Next != "" || len(p.Operations) != 3 {
		t.Errorf("exact page: %+v", p)
	}
	if p := ledger.NewPage(ops, 2); p.Next != "b" || len(p.Operations) != 2 {
		t.Errorf("page with more: %+v", p)
	}
	if l := (ledger.ListParams{Limit: 10_000}).PageLimit(); l != ledger.MaxPage {
		t.Errorf("limit not capped: %d", l)
	}
}

func TestOwnerError(t *testing.T) {
	l := ledger.Lease{OpID: "op_1", Token: "t", Fence: 2}
	cases := []struct {
		current *ledger.Operation
		illegal bool
	}{
		{&ledger.Operation{State: ledger.Executing, Fence: 3}, false}, // a newer lease exists
		{&ledger.Operation{State: ledger.Unknown, Fence: 2}, true},    // the lease lapsed
		{&ledger.Operation{State: ledger.Executing, Fence: 2}, false}, // a forged token
	}
	for _, c := range cases {
		err := ledger.OwnerError(ledger.StepComplete, l, c.current, ledger.Succeeded)
		if !errors.Is(err, ledger.ErrStaleOwner) || errors.Is(err, ledger.ErrIllegalTransition) != c.illegal {
			t.Errorf("%+v: %v", c.current, err)
		}
	}
}
