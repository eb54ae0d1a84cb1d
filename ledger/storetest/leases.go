package storetest

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// lapse waits until a Lapsing lease has certainly passed on the store's
// clock. It is a pause, not a timing assertion.
func lapse() { time.Sleep(5 * time.Millisecond) }

func testLeases(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)

	r := reserve(t, s, Params(time.Minute))
	l, err := s.Heartbeat(c, *r.Lease, Long)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Until.After(r.Lease.Until) || l.Token != r.Lease.Token || l.Fence != r.Lease.Fence {
		t.Fatalf("heartbeat: %+v after %+v", l, r.Lease)
	}
	if op := get(t, s, r.Op.ID); !op.LeaseUntil.Equal(l.Until) || len(history(t, s, op.ID)) != 1 {
		t.Fatalf("heartbeat stored lease %v, want %v, and no history row", op.LeaseUntil, l.Until)
	}
	forged := l
	forged.Token = ledger.NewToken()
	_, err = s.Heartbeat(c, forged, Long)
	wantErr(t, "heartbeat with a forged token", err, ledger.ErrStaleOwner)
	_, err = s.Complete(c, forged, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 200}})
	wantErr(t, "complete with a forged token", err, ledger.ErrStaleOwner)
	if op := get(t, s, r.Op.ID); op.State != ledger.Executing {
		t.Fatalf("forged token moved the operation to %s", op.State)
	}

	// A lapsed lease is never a free key: the next reservation of it finds
	// the operation unknown, not available.
	p := Params(Lapsing)
	r = reserve(t, s, p)
	lapse()
	again, err := s.Reserve(c, p)
	if err != nil {
		t.Fatal(err)
	}
	if again.Owned() || again.Op.State != ledger.Unknown || again.Op.LastError != "lease_expired" {
		t.Fatalf("reserve over a lapsed lease: owned %v state %s", again.Owned(), again.Op.State)
	}
	h := history(t, s, r.Op.ID)
	if len(h) != 2 || h[1].From != ledger.Executing || h[1].To != ledger.Unknown || h[1].Actor != ledger.ActorLeaseExpiry {
		t.Fatalf("history of an expired lease: %+v", h)
	}
	_, err = s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 200}})
	wantErr(t, "complete after the lease expired", err, ledger.ErrStaleOwner, ledger.ErrIllegalTransition)
	_, err = s.Heartbeat(c, *r.Lease, Long)
	wantErr(t, "heartbeat after the lease expired", err, ledger.ErrStaleOwner)

	// A lapsed lease is never extended, swept or not: it belongs to the
	// expiry. But until someone expires it, its owner's answer is the truth
	// and is recorded.
	r = reserve(t, s, Params(Lapsing))
	lapse()
	_, err = s.Heartbeat(c, *r.Lease, Long)
	wantErr(t, "heartbeat of a lapsed lease", err, ledger.ErrStaleOwner)
	op, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}})
	if err != nil || op.State != ledger.Succeeded {
		t.Fatalf("late complete before any expiry: %v", err)
	}
}

func testFencing(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)

	// Lease lapses, the sweep makes it unknown, a new owner re-sends (the
	// upstream honours the key): the first owner's late complete is refused.
	r := reserve(t, s, Params(Lapsing))
	old := *r.Lease
	lapse()
	if n, err := s.ExpireLeases(c, 10); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	nr, err := s.Acquire(c, ledger.AcquireParams{ID: old.OpID, Lease: Long, Actor: "worker-2", Resend: true})
	if err != nil {
		t.Fatal(err)
	}
	if nr.Lease.Fence <= old.Fence || nr.Lease.Token == old.Token || nr.Op.Attempts != 2 {
		t.Fatalf("new lease %+v after %+v, attempts %d", nr.Lease, old, nr.Op.Attempts)
	}
	for name, call := range map[string]func() error{
		"complete": func() error {
			_, err := s.Complete(c, old, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 200}})
			return err
		},
		"release":      func() error { _, err := s.Release(c, old, ledger.Note{}); return err },
		"mark unknown": func() error { _, err := s.MarkUnknown(c, old, ledger.Note{}); return err },
		"heartbeat":    func() error { _, err := s.Heartbeat(c, old, Long); return err },
	} {
		wantErr(t, "stale owner "+name, call(), ledger.ErrStaleOwner)
	}
	// Both must match: the old token with the new fence is refused, and so
	// is the new token with the old fence.
	mixed := *nr.Lease
	mixed.Token = old.Token
	_, err = s.Complete(c, mixed, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 200}})
	wantErr(t, "old token, new fence", err, ledger.ErrStaleOwner)
	mixed = *nr.Lease
	mixed.Fence = old.Fence
	_, err = s.Complete(c, mixed, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 200}})
	wantErr(t, "new token, old fence", err, ledger.ErrStaleOwner)
	_, err = s.Heartbeat(c, mixed, Long)
	wantErr(t, "heartbeat with new token, old fence", err, ledger.ErrStaleOwner)
	op, err := s.Complete(c, *nr.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}})
	if err != nil || op.State != ledger.Succeeded || op.Response.Status != 201 {
		t.Fatalf("current owner's complete: %v", err)
	}

	// Release and re-acquire: same story without any lease expiry.
	r = reserve(t, s, Params(Long))
	if _, err := s.Release(c, *r.Lease, ledger.Note{Reason: "dial refused"}); err != nil {
		t.Fatal(err)
	}
	nr, err = s.Acquire(c, ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "worker-2"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Failed, Response: &ledger.Response{Status: 422}})
	wantErr(t, "complete after release and re-acquire", err, ledger.ErrStaleOwner)
	if got := get(t, s, r.Op.ID); got.State != ledger.Executing || got.Fence != nr.Lease.Fence {
		t.Fatalf("stale complete changed the operation: %s fence %d", got.State, got.Fence)
	}
}

func testExpireLeases(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	var lapsed []string
	for range 5 {
		lapsed = append(lapsed, reserve(t, s, Params(Lapsing)).Op.ID)
	}
	live := reserve(t, s, Params(Long)).Op.ID
	lapse()
	var batches []int
	for {
		n, err := s.ExpireLeases(c, 2)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, n)
		if n == 0 {
			break
		}
	}
	if len(batches) != 4 || batches[0] != 2 || batches[1] != 2 || batches[2] != 1 {
		t.Fatalf("batches of at most 2 over 5 lapsed leases: %v", batches)
	}
	for _, id := range lapsed {
		op := get(t, s, id)
		h := history(t, s, id)
		if op.State != ledger.Unknown || len(h) != 2 || h[1].Actor != ledger.ActorLeaseExpiry || h[1].From != ledger.Executing {
			t.Fatalf("lapsed %s: state %s history %+v", id, op.State, h)
		}
	}
	if op := get(t, s, live); op.State != ledger.Executing {
		t.Fatalf("a live lease was expired: %s", op.State)
	}
}

func testRetention(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	short := func(lease time.Duration) ledger.ReserveParams {
		p := Params(lease)
		p.Retention = time.Millisecond
		return p
	}
	var purgeable, kept, freed []string
	for _, st := range []ledger.State{ledger.Succeeded, ledger.Failed, ledger.Prepared} {
		r := reserve(t, s, short(Long))
		switch st {
		case ledger.Prepared:
			_, err := s.Release(c, *r.Lease, ledger.Note{Reason: "dial refused"})
			mustOK(t, err)
		default:
			_, err := s.Complete(c, *r.Lease, ledger.Outcome{State: st, Response: &ledger.Response{Status: 200}})
			mustOK(t, err)
		}
		purgeable = append(purgeable, r.Op.ID)
		freed = append(freed, r.Op.Key)
	}
	// Executing and unknown operations outlive their retention: forgetting
	// them would let a retry repeat an effect that may have happened.
	kept = append(kept, reserve(t, s, short(Long)).Op.ID)
	r := reserve(t, s, short(Long))
	_, err := s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "timeout"})
	mustOK(t, err)
	kept = append(kept, r.Op.ID)
	// A final operation inside its retention stays.
	fresh, _ := reach(t, s, ledger.Succeeded)
	kept = append(kept, fresh.ID)

	time.Sleep(10 * time.Millisecond)
	total := 0
	for {
		n, err := s.Purge(c, 2)
		mustOK(t, err)
		if n > 2 {
			t.Fatalf("purge batch of %d over a limit of 2", n)
		}
		if total += n; n == 0 {
			break
		}
	}
	if total != len(purgeable) {
		t.Fatalf("purged %d, want %d", total, len(purgeable))
	}
	for _, id := range purgeable {
		if _, err := s.Get(c, id); err == nil {
			t.Fatalf("%s survived its retention", id)
		}
		// Its story outlives it: the audit log never forgets (docs/design.md).
		if h := history(t, s, id); len(h) == 0 {
			t.Fatalf("%s: purging it took its audit events", id)
		}
	}
	for _, id := range kept {
		get(t, s, id)
	}
	p := short(Long)
	p.Key = get(t, s, kept[2]).Key
	if r, err := s.Reserve(c, p); err != nil || r.Created {
		t.Fatalf("a key inside its retention was forgotten: %v", err)
	}
	// A purged key is free again: a new operation, not a replay.
	p.Key = freed[0]
	if r, err := s.Reserve(c, p); err != nil || !r.Created {
		t.Fatalf("a purged key was not free: %v", err)
	}
}

func mustOK(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// testCompleteAfterLapse: an owner that could not reach the store while
// its lease lapsed settles the operation the expiry made unknown
// (Outcome.AfterLapse), with the answer it holds, as long as nobody has
// taken the operation since; any other move in between fences it out.
func testCompleteAfterLapse(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	answer := ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201, Body: []byte(`{"id":"T-1"}`)},
		Reason: "http_201", AfterLapse: true}
	for _, expire := range []string{"sweep", "reservation"} {
		r := lapsed(t, s, expire)
		plain := answer
		plain.AfterLapse = false
		_, err := s.Complete(c, *r.Lease, plain)
		wantErr(t, "complete after the expiry, "+expire, err, ledger.ErrStaleOwner)
		op, err := s.Complete(c, *r.Lease, answer)
		if err != nil || op.State != ledger.Succeeded || get(t, s, r.Op.ID).Response.Status != 201 {
			t.Fatalf("complete after lapse (%s expiry): %+v, %v", expire, op, err)
		}
		h := history(t, s, r.Op.ID)
		if len(h) != 3 || h[2].From != ledger.Unknown || h[2].To != ledger.Succeeded || h[2].Actor != r.Lease.Actor {
			t.Fatalf("history: %+v", h)
		}
		again, err := s.Complete(c, *r.Lease, answer) // its reply was lost
		if err != nil || again.State != ledger.Succeeded || len(history(t, s, r.Op.ID)) != 3 {
			t.Fatalf("retried complete after lapse: %+v, %v", again, err)
		}
	}
	for name, between := range map[string]func(r ledger.Reservation) error{
		"re-sent by another owner": func(r ledger.Reservation) error {
			_, err := s.Acquire(c, ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "worker-2", Resend: true})
			return err
		},
		"resolved by an operator": func(r ledger.Reservation) error {
			_, err := s.Resolve(c, ledger.ResolveParams{ID: r.Op.ID, To: ledger.Prepared, Actor: "alice", Note: "not there"})
			return err
		},
	} {
		r := lapsed(t, s, "sweep")
		if err := between(r); err != nil {
			t.Fatal(err)
		}
		before := get(t, s, r.Op.ID)
		_, err := s.Complete(c, *r.Lease, answer)
		wantErr(t, "complete after lapse, "+name, err, ledger.ErrStaleOwner)
		if now := get(t, s, r.Op.ID); now.State != before.State || now.Fence != before.Fence {
			t.Fatalf("%s: a fenced-out completion moved the operation to %s", name, now.State)
		}
	}
	// Only the expiry's unknown: one its owner declared itself stays so,
	// and a forged token settles nothing.
	r := reserve(t, s, Params(Long))
	if _, err := s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "timeout", ErrorCode: "upstream_timeout"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Complete(c, *r.Lease, answer)
	wantErr(t, "complete after the owner's own unknown", err, ledger.ErrStaleOwner)
	r = lapsed(t, s, "sweep")
	forged := *r.Lease
	forged.Token = ledger.NewToken()
	_, err = s.Complete(c, forged, answer)
	wantErr(t, "complete after lapse with a forged token", err, ledger.ErrStaleOwner)
	if get(t, s, r.Op.ID).State != ledger.Unknown {
		t.Fatal("a forged token settled a lapsed operation")
	}
}

// lapsed reserves an operation whose lease lapses, made unknown by the
// sweep or by a reservation of its key that finds it lapsed.
func lapsed(t *testing.T, s ledger.Store, by string) ledger.Reservation {
	t.Helper()
	p := Params(Lapsing)
	r := reserve(t, s, p)
	lapse()
	if by == "sweep" {
		if n, err := s.ExpireLeases(ctx(t), 100); err != nil || n != 1 {
			t.Fatalf("expire: %d, %v", n, err)
		}
	} else if again, err := s.Reserve(ctx(t), p); err != nil || again.Op.State != ledger.Unknown {
		t.Fatalf("reserve over a lapsed lease: %+v, %v", again, err)
	}
	return r
}
