// Package teststore opens stores of each kind for tests: migrated, on a
// fresh database (a PostgreSQL schema of the test's own), and closed when
// the test ends.
package teststore

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/sqlite"
)

// Migrator is a store that migrates its own schema.
type Migrator interface {
	ledger.Store
	Migrate(context.Context) error
}

// Migrated is a store just opened (s, err), migrated, and closed when tb
// ends.
func Migrated[S Migrator](tb testing.TB, s S, err error) S {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return s
}

// SQLite opens a store on a fresh SQLite file.
func SQLite(tb testing.TB) ledger.Store {
	return sqliteAt(tb, filepath.Join(tb.TempDir(), "ledger.db"))
}

// Postgres opens a store on a fresh PostgreSQL schema of tb's own (tb
// skips when PostgreSQL is unreachable, and fails under CI=true).
func Postgres(tb testing.TB) ledger.Store {
	dsn, _ := testenv.PostgresSchema(tb)
	return postgresAt(tb, dsn)
}

// Each runs fn on each store, on a fresh database; open opens a handle
// on it (another process would have its own).
func Each(t *testing.T, fn func(t *testing.T, open func(testing.TB) ledger.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		fn(t, func(tb testing.TB) ledger.Store { return sqliteAt(tb, path) })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn, _ := testenv.PostgresSchema(t)
		fn(t, func(tb testing.TB) ledger.Store { return postgresAt(tb, dsn) })
	})
}

func sqliteAt(tb testing.TB, path string) ledger.Store {
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	return Migrated(tb, s, err)
}

func postgresAt(tb testing.TB, dsn string) ledger.Store {
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	return Migrated(tb, s, err)
}
