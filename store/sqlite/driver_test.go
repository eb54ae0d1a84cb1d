package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
	"path/filepath"
)

// TestExpireNeedsALapsedLease: the reserve path decides to expire a lease it
// read as lapsed; if the lease is live by the time the statement runs, the
// statement's own guard must refuse.
func TestExpireNeedsALapsedLease(t *testing.T) {
	c := context.Background()
	s, r := testStore(t)
	_, err := driver{s: s}.Apply(c, steps.Change{Step: ledger.StepExpire, From: ledger.Executing, To: ledger.Unknown,
		ID: r.Op.ID, Actor: ledger.ActorLeaseExpiry, ErrorCode: "lease_expired"})
	if !errors.Is(err, steps.ErrGuard) {
		t.Fatalf("expiring a live lease: %v", err)
	}
}

// TestOwnerStepsRelaxOnlyThemselves: a lazy completion must leave the
// writer's synchronous mode as configured, or the next reservation would be
// acknowledged before it is on disk.
func TestOwnerStepsRelaxOnlyThemselves(t *testing.T) {
	c := context.Background()
	s, r := testStore(t)
	if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	var mode int
	if err := s.write.QueryRowContext(c, "PRAGMA synchronous").Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("writer synchronous mode after a completion: %d (want 2, FULL), %v", mode, err)
	}
}

// testStore opens a migrated store in a new file, and reserves one key.
func testStore(t *testing.T) (*Store, ledger.Reservation) {
	t.Helper()
	c := context.Background()
	s, err := Open(c, filepath.Join(t.TempDir(), "l.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(c); err != nil {
		t.Fatal(err)
	}
	r, err := s.Reserve(c, ledger.ReserveParams{Tenant: "acme", Key: "k", Route: "/r", Fingerprint: "f",
		Lease: time.Hour, Retention: time.Hour, Actor: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}
