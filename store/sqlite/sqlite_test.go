package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	sqlitedrv "modernc.org/sqlite"

	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/ledger/storetest"
	"github.com/idemgate/idemgate/store/sqlite"
)

// paths remembers which file each store was opened on, for Another.
var paths = map[ledger.Store]string{}

func open(tb testing.TB, path string, opts sqlite.Options) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), path, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	paths[s] = path
	return s
}

// commits counts the write transactions committed by every connection the
// driver opens in these tests.
var commits atomic.Int64

func init() {
	sqlitedrv.RegisterConnectionHook(func(c sqlitedrv.ExecQuerierContext, _ string) error {
		c.(sqlitedrv.HookRegisterer).RegisterCommitHook(func() int32 { commits.Add(1); return 0 })
		return nil
	})
}

// The conformance suite runs with the production default, synchronous=FULL.
var backend = storetest.Backend{
	Commits: commits.Load,
	Fresh: func(tb testing.TB) ledger.Store {
		return open(tb, filepath.Join(tb.TempDir(), "ledger.db"), sqlite.Options{})
	},
	Another: func(tb testing.TB, s ledger.Store) ledger.Store { return open(tb, paths[s], sqlite.Options{}) },
}

func TestConformance(t *testing.T) { storetest.Run(t, backend) }

func openMigrated(ctx context.Context, dsn string) (ledger.Store, error) {
	s, err := sqlite.Open(ctx, dsn, sqlite.Options{})
	if err != nil {
		return nil, err
	}
	return s, s.Migrate(ctx)
}

func TestMain(m *testing.M) {
	if storetest.IsChild() {
		storetest.Child(openMigrated)
		return
	}
	m.Run()
}

// TestRaceProcesses: two OS processes open one new file, migrate it and race
// for the same keys at the same moment.
func TestRaceProcesses(t *testing.T) {
	storetest.RaceProcesses(t, filepath.Join(t.TempDir(), "shared.db"), 2)
}

// TestOddPath: a file name with the characters a URI reads as syntax.
func TestOddPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a?b#c%20d.db")
	s := open(t, path, sqlite.Options{})
	if _, err := s.Reserve(context.Background(), storetest.Params(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the store is not at the path given: %v", err)
	}
}

// TestWALStaysBounded: checkpoints keep resetting the write-ahead log. An
// INSERT … RETURNING reset before it is stepped to the end (as QueryRow
// does) pins the log, which then grows with every commit, and commits slow
// down with it.
func TestWALStaysBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wal.db")
	s := open(t, path, sqlite.Options{Synchronous: "OFF"})
	c := context.Background()
	for range 3000 {
		r, err := s.Reserve(c, storetest.Params(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded,
			Response: &ledger.Response{Status: 201, Body: []byte(`{"id":1}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// The default auto-checkpoint runs at 1,000 pages (4 MiB).
	if fi.Size() > 8<<20 {
		t.Fatalf("WAL is %d MiB after 3,000 lifecycles: it is never reset", fi.Size()>>20)
	}
}
