package dbtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// TestEachOpensHandlesOnOneDatabase: each kind's subtest gets a database
// of its own, empty, and every Open is another handle on it.
func TestEachOpensHandlesOnOneDatabase(t *testing.T) {
	t.Parallel()
	var kinds []string
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		kinds = append(kinds, db.Kind)
		if db.Kind == dbtest.KindSQLite && !strings.HasPrefix(db.DSN, "sqlite:") ||
			db.Kind == dbtest.KindPostgres && !strings.HasPrefix(db.DSN, "postgres") {
			t.Fatalf("%s names its database %q", db.Kind, db.DSN)
		}
		c := context.Background()
		a, b := db.Open(t), db.Open(t)
		r, err := a.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
			Tenant: "acme", Key: "k", Route: "POST /v1/x",
			Fingerprint: "sha256:aa", Lease: time.Minute, Retention: time.Hour, Actor: "t"})
		if err != nil || !r.Created {
			t.Fatalf("reserve on a new database: %+v %v", r, err)
		}
		if op, err := b.Get(c, r.Op.ID); err != nil || op.Key != "k" {
			t.Fatalf("the second handle does not see the first's operation: %+v %v", op, err)
		}
	})
	if len(kinds) == 0 || kinds[0] != dbtest.KindSQLite {
		t.Fatalf("subtests ran for %v", kinds)
	}
}
