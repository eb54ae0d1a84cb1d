package limits

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/idemgate/idemgate/ledger"
)

// fakeClock is the limiter's clock, moved by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTest(p Policy, usage func(context.Context, string) (ledger.Usage, error)) (*Limiter, *fakeClock) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	l := New(Options{Usage: usage, Policy: func(string) Policy { return p }, Resync: 10 * time.Second})
	l.now = clock.now
	return l, clock
}

func TestRate(t *testing.T) {
	l, _ := newTest(Policy{Rate: 1, Burst: 3}, nil)
	for i := range 3 {
		if r := l.Request("acme"); r != nil {
			t.Fatalf("request %d within the burst: %v", i, r)
		}
	}
	r := l.Request("acme")
	if r == nil || r.RetryAfter < time.Second {
		t.Fatalf("over the burst: %+v", r)
	}
	if r := l.Request("globex"); r != nil {
		t.Fatalf("another tenant shares the bucket: %v", r)
	}
}

func TestBudgets(t *testing.T) {
	var reads atomic.Int64
	held := ledger.Usage{Live: 8, Stored: 1 << 20}
	l, clock := newTest(Policy{MaxLive: 10, MaxStored: 2 << 20}, func(context.Context, string) (ledger.Usage, error) {
		reads.Add(1)
		return held, nil
	})
	c := context.Background()
	for i := range 2 {
		if _, r := l.NewOperation(c, "acme", Admission{}); r != nil {
			t.Fatalf("operation %d within the budget: %v", i, r)
		}
	}
	if _, r := l.NewOperation(c, "acme", Admission{}); r == nil || r.RetryAfter != 10*time.Second {
		t.Fatalf("the 11th live operation: %+v", r)
	}
	if reads.Load() != 1 {
		t.Fatalf("usage read %d times within Resync", reads.Load())
	}
	// Once stale, the store's figure (which holds the two admitted) replaces
	// what this instance counted before it read; what it admits while the
	// read runs in the background is kept on top of it.
	clock.t = clock.t.Add(11 * time.Second)
	l.NewOperation(c, "acme", Admission{})
	acme := l.tenant("acme")
	waitFor(t, func() bool { acme.mu.Lock(); defer acme.mu.Unlock(); return reads.Load() == 2 && !acme.refreshing })
	if _, r := l.NewOperation(c, "acme", Admission{}); r != nil {
		t.Fatalf("after the store's new figure: %v", r)
	}
	l.Stored("acme", 1<<20)
	if _, r := l.NewOperation(c, "acme", Admission{}); r == nil {
		t.Fatal("over the stored-bytes budget: admitted")
	}
}

// TestSettledOperationsLeaveTheLiveBudget: the live budget counts
// operations not yet final; requests whose operations finished, or that
// created none, give their place back, before the next read and across it.
func TestSettledOperationsLeaveTheLiveBudget(t *testing.T) {
	var held atomic.Int64
	l, clock := newTest(Policy{MaxLive: 2}, func(context.Context, string) (ledger.Usage, error) {
		return ledger.Usage{Live: held.Load()}, nil
	})
	c := context.Background()
	for i := range 10 {
		settle, r := l.NewOperation(c, "acme", Admission{})
		if r != nil {
			t.Fatalf("request %d, after %d operations that all finished: %v", i, i, r)
		}
		settle(true, false)
	}
	keep, _ := l.NewOperation(c, "acme", Admission{})
	_, _ = l.NewOperation(c, "acme", Admission{}) // still running
	if _, r := l.NewOperation(c, "acme", Admission{}); r == nil {
		t.Fatal("a third live operation: admitted")
	}
	// The store now counts both; one of them finishes after the read.
	held.Store(2)
	clock.t = clock.t.Add(11 * time.Second)
	_, _ = l.NewOperation(c, "acme", Admission{}) // refused, and starts the read
	acme := l.tenant("acme")
	waitFor(t, func() bool { acme.mu.Lock(); defer acme.mu.Unlock(); return !acme.refreshing })
	keep(true, false)
	if _, r := l.NewOperation(c, "acme", Admission{}); r != nil {
		t.Fatalf("one of two finished after the read: %v", r)
	}
}

// TestBytesAndApprovalsCountAtAdmission: a new operation's estimated
// bytes and its pending approval count the moment it is admitted, before
// the store's next figure, and come back if it created nothing.
func TestBytesAndApprovalsCountAtAdmission(t *testing.T) {
	l, _ := newTest(Policy{MaxStored: 100 << 10, MaxPending: 2}, func(context.Context, string) (ledger.Usage, error) {
		return ledger.Usage{}, nil
	})
	c := context.Background()
	apr := Admission{Bytes: 10 << 10, Approval: true}
	first, r := l.NewOperation(c, "acme", apr)
	if r != nil {
		t.Fatal(r)
	}
	first(false, false) // it created nothing: its approval and bytes come back
	for i := range 2 {
		if _, r := l.NewOperation(c, "acme", apr); r != nil {
			t.Fatalf("approval %d of 2: %v", i, r)
		}
	}
	if _, r := l.NewOperation(c, "acme", apr); r == nil || !strings.Contains(r.Reason, "2 approvals pending") {
		t.Fatalf("a third pending approval: %v", r)
	}
	if _, r := l.NewOperation(c, "acme", Admission{Bytes: 80 << 10}); r != nil {
		t.Fatalf("an operation without an approval, within the bytes: %v", r)
	}
	if _, r := l.NewOperation(c, "acme", Admission{Bytes: 1}); r == nil || !strings.Contains(r.Reason, "100 KiB") {
		t.Fatalf("over the bytes: %v", r)
	}
	if _, r := l.NewOperation(c, "globex", Admission{Bytes: 1, Approval: true}); r != nil {
		t.Fatalf("another tenant: %v", r)
	}
}

func TestUsageErrorAdmits(t *testing.T) {
	var heard error
	l := New(Options{Policy: func(string) Policy { return Policy{MaxLive: 1} },
		Usage:   func(context.Context, string) (ledger.Usage, error) { return ledger.Usage{}, errors.New("down") },
		OnError: func(_ string, err error) { heard = err }})
	if _, r := l.NewOperation(context.Background(), "acme", Admission{}); r != nil || heard == nil {
		t.Fatalf("a store that cannot say: %v, heard %v", r, heard)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]rate.Limit{"100/s": 100, "60/m": 1, "3600/h": 1, "2.5": 2.5, "0/s": 0} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "fast", "10/d", "-1/s", "1/s/s", "Inf", "NaN"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSetPolicyKeepsWhatWasSpent: a reloaded configuration's limits apply
// at once, and a reload is no way to refill a bucket or forget a budget.
func TestSetPolicyKeepsWhatWasSpent(t *testing.T) {
	held := ledger.Usage{Live: 5}
	l, _ := newTest(Policy{Rate: 0.001, Burst: 2, MaxLive: 10}, func(context.Context, string) (ledger.Usage, error) {
		return held, nil
	})
	for range 2 {
		if r := l.Request("acme"); r != nil {
			t.Fatalf("within the burst: %v", r)
		}
	}
	if _, r := l.NewOperation(context.Background(), "acme", Admission{}); r != nil {
		t.Fatalf("within the budget: %v", r)
	}
	l.SetPolicy(func(string) Policy { return Policy{Rate: 0.001, Burst: 5, MaxLive: 6} })
	if r := l.Request("acme"); r == nil {
		t.Fatal("the burst was spent before the reload: a larger burst is no refill")
	}
	if _, r := l.NewOperation(context.Background(), "acme", Admission{}); r == nil {
		t.Fatal("5 held and 1 admitted before the reload: the new budget of 6 is full")
	}
	l.SetPolicy(func(string) Policy { return Policy{} })
	for range 100 {
		if r := l.Request("acme"); r != nil {
			t.Fatalf("no rate any more: %v", r)
		}
	}
}
