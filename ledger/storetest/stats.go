package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// testStats: the metrics' gauges as the store reads them, per tenant:
// operations by state, the oldest executing and unknown, those executing
// past their lease, pending approvals and the oldest, and the latest
// checkpoint; another handle on the same data reads the same.
func testStats(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	before := time.Now().Add(-time.Second)
	reserve(t, s, Params(Long))                   // executing
	stuck := reserve(t, s, Params(Lapsing)).Op.ID // executing, past its lease
	reach(t, s, ledger.Succeeded)
	reach(t, s, ledger.Unknown)
	reserve(t, s, ApprovalParams(Long, Long))
	other := Params(Long)
	other.Tenant = "globex"
	reserve(t, s, other)
	sg, _ := signer(t)
	seal(t, &audit.Sealer{Log: s, Signing: audit.Signing{Signer: sg, Name: "t", Every: 1}})
	time.Sleep(2 * time.Millisecond)
	handles := []ledger.Store{s}
	if b.Another != nil {
		handles = append(handles, b.Another(t, s))
	}
	for _, h := range handles {
		stats, err := h.Stats(c)
		if err != nil || len(stats) != 2 || stats[0].Tenant != "acme" || stats[1].Tenant != "globex" {
			t.Fatalf("stats %+v %v", stats, err)
		}
		acme := stats[0]
		want := map[ledger.State]int64{ledger.Executing: 2, ledger.Succeeded: 1, ledger.Unknown: 1, ledger.Prepared: 1}
		for st, n := range want {
			if acme.ByState[st] != n {
				t.Fatalf("acme %s: %d, want %d (%v)", st, acme.ByState[st], n, acme.ByState)
			}
		}
		if acme.Stuck != 1 || acme.ApprovalsPending != 1 || acme.OldestExecuting.Before(before) ||
			acme.OldestUnknown.Before(before) || acme.OldestApproval.Before(before) || acme.LastCheckpoint.Before(before) {
			t.Fatalf("acme %+v (the stuck one is %s)", acme, stuck)
		}
		if g := stats[1]; g.ByState[ledger.Executing] != 1 || g.Stuck != 0 || g.ApprovalsPending != 0 ||
			!g.OldestUnknown.IsZero() || !g.OldestApproval.IsZero() {
			t.Fatalf("globex %+v", g)
		}
	}
}

// testCommitStats: a handle counts its own group commits, each with the
// steps it carried and the time it took: a reservation and a completion
// one after the other are two commits of one step each; sixteen
// reservations at once are sixteen steps in at most sixteen commits;
// another handle on the same data counts none of them.
func testCommitStats(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	var other ledger.Store
	var otherBefore ledger.CommitStats
	if b.Another != nil {
		other = b.Another(t, s)
		otherBefore = other.CommitStats() // its own opening may have written
	}
	before := s.CommitStats()
	r := reserve(t, s, Params(Long))
	if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: benchResponse}); err != nil {
		t.Fatal(err)
	}
	after := s.CommitStats()
	if d := delta(before, after); d.Commits != 2 || d.Steps != 2 || d.Time <= 0 {
		t.Fatalf("reserve then complete counted %+v, want 2 commits of 1 step each, and their time", d)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { reserve(t, s, Params(Long)) })
	}
	wg.Wait()
	if d := delta(after, s.CommitStats()); d.Steps != 16 || d.Commits < 1 || d.Commits > 16 {
		t.Fatalf("16 reservations at once counted %+v, want 16 steps in 1 to 16 commits", d)
	}
	if other != nil && other.CommitStats() != otherBefore {
		t.Fatalf("another handle counted %+v of this one's commits", delta(otherBefore, other.CommitStats()))
	}
}

func delta(a, b ledger.CommitStats) ledger.CommitStats {
	return ledger.CommitStats{Commits: b.Commits - a.Commits, Steps: b.Steps - a.Steps, Time: b.Time - a.Time}
}
