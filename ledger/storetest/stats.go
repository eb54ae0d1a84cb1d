package storetest

import (
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
