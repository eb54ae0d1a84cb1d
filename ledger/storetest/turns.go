package storetest

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// settleTurn runs one relay turn.
func settleTurn(tb testing.TB, s ledger.Store, claim int, results ...ledger.EffectResult) ledger.EffectSettled {
	tb.Helper()
	p := ledger.EffectSettle{Results: results}
	if claim > 0 {
		p.Claim = ledger.EffectClaimParams{Targets: []string{"crm"}, Limit: claim, Lease: Long}
	}
	out, err := s.SettleEffects(ctx(tb), p)
	if err != nil || len(out.Recorded) != len(results) {
		tb.Fatalf("settle effects: %+v %v", out, err)
	}
	return out
}

// testEffectsSettle: a relay's turn records its results, each on its own
// (a fenced one is refused, the others recorded), then claims, and the
// claim sees the results: an operation's next effect goes out in the turn
// that recorded its predecessor. A turn with no claim only records; a
// result recorded again is no error; a bad turn changes nothing.
func testEffectsSettle(t *testing.T, b Backend) {
	s := b.Fresh(t)
	a := enqueue(t, s, effectsOf(2, "crm"))
	other := enqueue(t, s, effectsOf(1, "crm"))
	c := claimEffects(t, s, 10)
	if len(c) != 2 {
		t.Fatalf("first claim: %+v", c)
	}
	mine, theirs := c[0], c[1]
	if mine.Effect.ID != a[0].ID {
		mine, theirs = theirs, mine
	}
	fenced := theirs.Lease
	fenced.Fence++
	done := ledger.EffectOutcome{State: ledger.Succeeded, Status: 201, ResultRef: "ref-1"}
	turn := settleTurn(t, s, 10, ledger.EffectResult{Lease: mine.Lease, Outcome: done},
		ledger.EffectResult{Lease: fenced, Outcome: done})
	wantErr(t, "a fenced result in a turn", turn.Recorded[1], ledger.ErrStaleOwner)
	if turn.Recorded[0] != nil || len(turn.Claims) != 1 || turn.Claims[0].Effect.ID != a[1].ID ||
		turn.Claims[0].Effect.State != ledger.Executing || turn.Claims[0].Lease.Token == "" {
		t.Fatalf("the turn: %+v", turn)
	}
	if e, err := s.GetEffect(ctx(t), a[0].ID); err != nil || e.State != ledger.Succeeded || e.Status != 201 ||
		e.ResultRef != "ref-1" {
		t.Fatalf("the recorded result: %+v %v", e, err)
	}
	if e, err := s.GetEffect(ctx(t), other[0].ID); err != nil || e.State != ledger.Executing {
		t.Fatalf("the fenced result changed its effect: %+v %v", e, err)
	}
	last := ledger.EffectResult{Lease: turn.Claims[0].Lease, Outcome: done}
	retry := ledger.EffectResult{Lease: theirs.Lease, Outcome: ledger.EffectOutcome{State: ledger.Unknown,
		ErrorCode: "target_timeout", RetryIn: time.Hour}}
	if turn := settleTurn(t, s, 0, last, retry); turn.Recorded[0] != nil || turn.Recorded[1] != nil || len(turn.Claims) != 0 {
		t.Fatalf("a turn with no claim: %+v", turn)
	}
	if turn := settleTurn(t, s, 0, last); turn.Recorded[0] != nil {
		t.Fatalf("a result recorded again: %v", turn.Recorded[0])
	}
	if e, err := s.GetEffect(ctx(t), other[0].ID); err != nil || e.State != ledger.Unknown || e.NextAt.IsZero() {
		t.Fatalf("an unknown result: %+v %v", e, err)
	}
	// One effect's results under a lapsed claim and under the claim that
	// took it since, in one turn: each answered on its own.
	again := enqueue(t, s, effectsOf(1, "crm"))
	lapsed, err := s.ClaimEffects(ctx(t), ledger.EffectClaimParams{Targets: []string{"crm"}, Limit: 1, Lease: Lapsing})
	if err != nil || len(lapsed) != 1 || lapsed[0].Effect.ID != again[0].ID {
		t.Fatalf("a lapsing claim: %+v %v", lapsed, err)
	}
	time.Sleep(5 * time.Millisecond)
	retaken := claimEffects(t, s, 1)
	if len(retaken) != 1 || retaken[0].Effect.ID != again[0].ID {
		t.Fatalf("the claim after the lapse: %+v", retaken)
	}
	both := settleTurn(t, s, 0, ledger.EffectResult{Lease: lapsed[0].Lease, Outcome: done},
		ledger.EffectResult{Lease: retaken[0].Lease, Outcome: done})
	wantErr(t, "the lapsed claim's result", both.Recorded[0], ledger.ErrStaleOwner)
	if both.Recorded[1] != nil {
		t.Fatalf("the current claim's result: %v", both.Recorded[1])
	}
	for what, bad := range map[string]ledger.EffectSettle{
		"a bad outcome":          {Results: []ledger.EffectResult{{Lease: last.Lease, Outcome: ledger.EffectOutcome{State: ledger.Executing}}}},
		"a claim with no target": {Claim: ledger.EffectClaimParams{Limit: 1, Lease: Long}},
	} {
		_, err := s.SettleEffects(ctx(t), bad)
		wantErr(t, what, err, ledger.ErrInvalid)
	}
}
