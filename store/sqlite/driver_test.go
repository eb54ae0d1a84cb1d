package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// TestExpireNeedsALapsedLease: the reserve path decides to expire a lease it
// read as lapsed; if the lease is live by the time the statement runs, the
// statement's own guard must refuse.
func TestExpireNeedsALapsedLease(t *testing.T) {
	t.Parallel()
	c := context.Background()
	s, r := testStore(t, Options{})
	_, err := step(s, c, durable, func(ctx context.Context, d driver) (*ledger.Operation, error) {
		return d.Apply(ctx, steps.Change{Step: ledger.StepExpire, From: ledger.Executing, To: ledger.Unknown,
			ID: r.Op.ID, Actor: ledger.ActorLeaseExpiry, ErrorCode: "lease_expired"})
	})
	if !errors.Is(err, steps.ErrGuard) {
		t.Fatalf("expiring a live lease: %v", err)
	}
}

// TestDurability: by default every batch waits for the disk (FULL); with
// durability=relaxed a batch of owner steps alone does not, and the next
// batch with a reservation waits again.
func TestDurability(t *testing.T) {
	t.Parallel()
	c := context.Background()
	for _, relaxed := range []bool{false, true} {
		s, r := testStore(t, Options{Relaxed: relaxed})
		if got := syncMode(t, s, durable); got != 2 {
			t.Fatalf("relaxed=%v: a durable step ran with synchronous=%d, want 2 (FULL)", relaxed, got)
		}
		if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded,
			Response: &ledger.Response{Status: 201}}); err != nil {
			t.Fatal(err)
		}
		want := map[bool]int{false: 2, true: 1}[relaxed]
		if got := syncMode(t, s, owning); got != want {
			t.Fatalf("relaxed=%v: an owner step ran with synchronous=%d, want %d", relaxed, got, want)
		}
		if got := syncMode(t, s, reserving); got != 2 {
			t.Fatalf("relaxed=%v: a reservation after it ran with synchronous=%d, want 2 (FULL)", relaxed, got)
		}
	}
}

// TestWeakSynchronousIsRelaxed: a store that may lose an acknowledged
// commit says so, whatever durability says, so that nothing (the replay
// cache) takes its word as durable; durability=strict with such a mode is
// refused as a contradiction.
func TestWeakSynchronousIsRelaxed(t *testing.T) {
	t.Parallel()
	for mode, relaxed := range map[string]bool{"FULL": false, "EXTRA": false, "NORMAL": true, "OFF": true} {
		s, _ := testStore(t, Options{Synchronous: mode})
		if s.Relaxed() != relaxed || ledger.IsRelaxed(s) != relaxed {
			t.Errorf("synchronous=%s: relaxed %v, want %v", mode, s.Relaxed(), relaxed)
		}
	}
	for dsn, ok := range map[string]bool{"sqlite:x.db?synchronous=NORMAL&durability=strict": false,
		"sqlite:x.db?synchronous=off&durability=strict": false, "sqlite:x.db?synchronous=FULL&durability=strict": true,
		"sqlite:x.db?synchronous=NORMAL&durability=relaxed": true, "sqlite:x.db?synchronous=NORMAL": true} {
		if _, _, err := ParseDSN(dsn); (err == nil) != ok {
			t.Errorf("%s: %v", dsn, err)
		}
	}
}

// syncMode runs a step of kind k alone and returns the synchronous mode
// its batch ran with.
func syncMode(t *testing.T, s *Store, k kind) int {
	t.Helper()
	mode, err := step(s, context.Background(), k, func(ctx context.Context, d driver) (int, error) {
		var m int
		return m, queryRow(ctx, d.q, "PRAGMA synchronous").Scan(&m)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mode
}

// testStore opens a migrated store in a new file, and reserves one key.
func testStore(t *testing.T, opts Options) (*Store, ledger.Reservation) {
	t.Helper()
	c := context.Background()
	s, err := Open(c, filepath.Join(t.TempDir(), "l.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(c); err != nil {
		t.Fatal(err)
	}
	r, err := s.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "k", Route: "/r", Fingerprint: "f",
		Lease: time.Hour, Retention: time.Hour, Actor: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

// TestErrorsAfterTheFirstRowCount: a driver error met while stepping past
// the row a step scans (where an autocommitted statement commits, and
// SQLITE_FULL shows up) is the step's error, not lost once the row is read.
func TestErrorsAfterTheFirstRowCount(t *testing.T) {
	t.Parallel()
	s, _ := testStore(t, Options{})
	var one int
	err := queryRow(context.Background(), s.reads, `SELECT 1 UNION ALL SELECT abs(-9223372036854775808)`).Scan(&one)
	if err == nil || !strings.Contains(err.Error(), "integer overflow") {
		t.Fatalf("an error after the first row: %v (scanned %d)", err, one)
	}
}
