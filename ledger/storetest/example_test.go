package storetest_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/ledger/storetest"
	"github.com/idemgate/idemgate/store/sqlite"
)

// ExampleRun is how a store of another project's (here a stand-in that
// opens SQLite files; yours opens your database) proves that it keeps
// the ledger's contract: its own tests give the suite a Backend, and
// storetest.Run drives it through every transition, lease, fence, race
// and the in-memory model. It runs under the store's `go test`, as
// store/sqlite's and store/postgres's TestConformance do.
func ExampleRun() {
	var paths sync.Map // each store's file; Run calls the Backend from parallel subtests
	open := func(tb testing.TB, path string) ledger.Store {
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { s.Close() })
		if err := s.Migrate(context.Background()); err != nil {
			tb.Fatal(err)
		}
		paths.Store(s, path)
		return s
	}
	backend := storetest.Backend{
		// Fresh: an empty, migrated store of the test's own.
		Fresh: func(tb testing.TB) ledger.Store { return open(tb, filepath.Join(tb.TempDir(), "ledger.db")) },
		// Another: a second handle on the same data, as a second gateway.
		Another: func(tb testing.TB, s ledger.Store) ledger.Store {
			path, _ := paths.Load(s)
			return open(tb, path.(string))
		},
		// Commits (the common path's cost), and Begin and Rows (steps in a
		// caller's transaction), where the store offers them: the tests
		// that need them say they skip without them.
	}
	// In the store's own package: func TestConformance(t *testing.T) { storetest.Run(t, backend) }
	conformance := func(t *testing.T) { storetest.Run(t, backend) }
	_ = conformance
}
