package storetest

import (
	"sync"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// testRaceDecisions: an approve and a deny at once: exactly one wins, and
// the operation ends as the winner says.
func testRaceDecisions(t *testing.T, b Backend) {
	s := b.Fresh(t)
	for range 10 {
		r := reserve(t, s, ApprovalParams(Long, Long))
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, decide := range []func() (*ledger.Approval, error){
			func() (*ledger.Approval, error) { return s.Approve(ctx(t), decision(r.Op.Approval.ID)) },
			func() (*ledger.Approval, error) {
				d := decision(r.Op.Approval.ID)
				d.Actor = "bob"
				return s.Deny(ctx(t), d)
			},
		} {
			wg.Go(func() { _, errs[i] = decide() })
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("approve %v, deny %v: want exactly one to win", errs[0], errs[1])
		}
		loser := errs[0]
		if loser == nil {
			loser = errs[1]
		}
		wantErr(t, "the losing decision", loser, ledger.ErrApprovalClosed)
		op, a := get(t, s, r.Op.ID), getApproval(t, s, r.Op.Approval.ID)
		if (errs[0] == nil) != (op.State == ledger.Prepared && a.Status == ledger.ApprovalApproved && a.DecidedBy == "alice") ||
			(errs[1] == nil) != (op.State == ledger.Failed && a.Status == ledger.ApprovalDenied && a.DecidedBy == "bob") {
			t.Fatalf("after the race: %s, approval %s by %s", op.State, a.Status, a.DecidedBy)
		}
	}
}

// testRaceApprovedRetries: many acquires right after the approval: exactly
// one takes the lease, and the approval is used once.
func testRaceApprovedRetries(t *testing.T, b Backend) {
	s := b.Fresh(t)
	r := reserve(t, s, ApprovalParams(Long, Long))
	if _, err := s.Approve(ctx(t), decision(r.Op.Approval.ID)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	owned := 0
	for range 20 {
		wg.Go(func() {
			res, err := s.Acquire(ctx(t), ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "gw"})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && res.Owned():
				owned++
			case err == nil:
				t.Errorf("acquire without a lease: %+v", res)
			default:
				wantErr(t, "a losing acquire", err, ledger.ErrIllegalTransition)
			}
		})
	}
	wg.Wait()
	op := get(t, s, r.Op.ID)
	if owned != 1 || op.Attempts != 1 || op.Fence != 1 || getApproval(t, s, r.Op.Approval.ID).Status != ledger.ApprovalUsed {
		t.Fatalf("%d owners, attempts %d, fence %d", owned, op.Attempts, op.Fence)
	}
}
