package storetest

import (
	"sync"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// Racers is how many goroutines race for one key.
const Racers = 64

// raceOnce has n callers reserve the same key at once, across the given
// handles, and checks that exactly one owns it and all see one operation.
func raceOnce(t *testing.T, handles []ledger.Store, n int) {
	p := Params(Long)
	start := make(chan struct{})
	results := make([]ledger.Reservation, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = handles[i%len(handles)].Reserve(ctx(t), p)
		}()
	}
	close(start)
	wg.Wait()
	owners, id := 0, ""
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if r.Owned() {
			owners++
		}
		if r.Created != r.Owned() {
			t.Fatalf("racer %d: created %v owned %v", i, r.Created, r.Owned())
		}
		if id == "" {
			id = r.Op.ID
		}
		if r.Op.ID != id {
			t.Fatalf("racer %d saw operation %s, another saw %s", i, r.Op.ID, id)
		}
	}
	if owners != 1 {
		t.Fatalf("%d owners of one key, want exactly 1", owners)
	}
	if h := history(t, handles[0], id); len(h) != 1 {
		t.Fatalf("%d reservation rows in the history, want 1", len(h))
	}
}

func testRaceReserve(t *testing.T, b Backend) {
	s := b.Fresh(t)
	for range 5 {
		raceOnce(t, []ledger.Store{s}, Racers)
	}
}

// testRaceTwoHandles races through two independent handles (pools), as two
// gateway instances on one database would.
func testRaceTwoHandles(t *testing.T, b Backend) {
	s := b.Fresh(t)
	other := b.Another(t, s)
	for range 5 {
		raceOnce(t, []ledger.Store{s, other}, Racers)
	}
}

// testRaceCompleteVsExpiry has owners complete while two sweepers expire the
// same lapsed leases: every operation ends in exactly one of the two
// outcomes, each recorded once, and a refused owner is told it is stale.
func testRaceCompleteVsExpiry(t *testing.T, b Backend) {
	s := b.Fresh(t)
	other := b.Another(t, s)
	const n = 40
	var leases []ledger.Lease
	for range n {
		leases = append(leases, *reserve(t, s, Params(Lapsing)).Lease)
	}
	lapse()
	var wg sync.WaitGroup
	completeErrs := make([]error, n)
	for i, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, completeErrs[i] = s.Complete(ctx(t), l, ledger.Outcome{State: ledger.Succeeded,
				Response: &ledger.Response{Status: 201}})
		}()
	}
	expired := make([]int, 2)
	for i, h := range []ledger.Store{s, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k, err := h.ExpireLeases(ctx(t), 3)
				if err != nil {
					t.Error(err)
					return
				}
				if k == 0 {
					return
				}
				expired[i] += k
			}
		}()
	}
	wg.Wait()
	completed := 0
	for i, l := range leases {
		op := get(t, s, l.OpID)
		h := history(t, s, l.OpID)
		if len(h) != 2 {
			t.Fatalf("%s: %d history rows, want 2: %+v", l.OpID, len(h), h)
		}
		switch op.State {
		case ledger.Succeeded:
			completed++
			if completeErrs[i] != nil {
				t.Fatalf("%s succeeded but its owner got %v", l.OpID, completeErrs[i])
			}
		case ledger.Unknown:
			wantErr(t, "complete that lost to expiry", completeErrs[i], ledger.ErrStaleOwner)
		default:
			t.Fatalf("%s ended %s", l.OpID, op.State)
		}
	}
	if completed+expired[0]+expired[1] != n {
		t.Fatalf("%d completed + %v expired != %d", completed, expired, n)
	}
}
