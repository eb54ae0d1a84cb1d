package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// TestExpireNeedsALapsedLease: the reserve path decides to expire a lease it
// read as lapsed; if the lease is live by the time the statement runs, the
// statement's own guard must refuse.
func TestExpireNeedsALapsedLease(t *testing.T) {
	c := context.Background()
	s, r := testStore(t, Options{})
	_, err := driver{s: s}.Apply(c, steps.Change{Step: ledger.StepExpire, From: ledger.Executing, To: ledger.Unknown,
		ID: r.Op.ID, Actor: ledger.ActorLeaseExpiry, ErrorCode: "lease_expired"})
	if !errors.Is(err, steps.ErrGuard) {
		t.Fatalf("expiring a live lease: %v", err)
	}
}

// TestOwnerStepsRelaxOnlyThemselves: the lazy commit of a completion is
// local to its transaction; the session (and the next reservation on it)
// keeps waiting for the disk.
func TestOwnerStepsRelaxOnlyThemselves(t *testing.T) {
	c := context.Background()
	s, r := testStore(t, Options{MaxConns: 1})
	if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := s.pool.QueryRow(c, "SHOW synchronous_commit").Scan(&mode); err != nil || mode != "on" {
		t.Fatalf("synchronous_commit after a completion: %q, %v", mode, err)
	}
}

// testStore opens a migrated store on a fresh schema, and reserves one key.
func testStore(t *testing.T, opts Options) (*Store, ledger.Reservation) {
	t.Helper()
	c := context.Background()
	dsn, _ := testenv.PostgresSchema(t)
	s, err := Open(c, dsn, opts)
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
