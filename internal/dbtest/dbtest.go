// Package dbtest opens the stores tests run on: a migrated store of each
// kind on a database of the test's own (a file in the test's directory, a
// PostgreSQL schema made for it), closed, and the schema dropped, when the
// test ends. A test that owns its database this way shares nothing with
// the others, and may run in parallel with them.
//
// Only tests import it (internal/layout checks). The stores' own
// in-package tests cannot (it imports the stores); their external test
// packages may.
package dbtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/sqlite"
)

// Store is what every kind of store is: a ledger.Store that brings its
// schema up to date.
type Store interface {
	ledger.Store
	Migrate(ctx context.Context) error
}

// SQLite opens a migrated store on a new file in a directory of the
// test's own, with opts if given.
func SQLite(tb testing.TB, opts ...sqlite.Options) *sqlite.Store {
	tb.Helper()
	return SQLiteAt(tb, filepath.Join(tb.TempDir(), "ledger.db"), opts...)
}

// SQLiteAt opens a migrated store on the file at path, for a test that
// needs the path: to open a second handle on it, to hand it to another
// process, or to do to the file what a crash or a full disk does.
func SQLiteAt(tb testing.TB, path string, opts ...sqlite.Options) *sqlite.Store {
	tb.Helper()
	if err := seedSQLite(path); err != nil {
		tb.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), path, one(tb, opts))
	return Migrated(tb, s, err)
}

// sqliteTemplate is the bytes of a SQLite store just migrated, made once
// per test process: a test's new file starts as a copy of it rather than
// running every migration again under -race (7% of the server package's
// CPU). Migrate still runs on the copy, and finds nothing to do.
var sqliteTemplate = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "dbtest-sqlite-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ledger.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(context.Background()); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	// The last connection to close checkpoints the log into the file and
	// removes it: a log left behind would hold part of the schema.
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("dbtest: the template's log was not checkpointed (%d bytes)", fi.Size())
	}
	return os.ReadFile(path)
})

// seedSQLite makes path, if no file is there, a copy of the migrated
// template, with the mode the store gives a file it creates (0600). An
// existing file is left alone: a second handle opens what the first made.
func seedSQLite(path string) error {
	tmpl, err := sqliteTemplate()
	if err != nil {
		return fmt.Errorf("dbtest: a migrated SQLite template: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(tmpl); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// PostgresDSN creates an empty schema of the test's own, dropped when the
// test ends, and returns the DSN that selects it. It skips the test when
// PostgreSQL is unreachable, or fails it under CI (see testenv).
func PostgresDSN(tb testing.TB) string {
	tb.Helper()
	dsn, _ := testenv.PostgresSchema(tb)
	return dsn
}

// Postgres opens a migrated store on a schema of the test's own (from
// the pool: see PostgresMigratedDSN), with opts if given.
func Postgres(tb testing.TB, opts ...postgres.Options) *postgres.Store {
	tb.Helper()
	return PostgresAt(tb, PostgresMigratedDSN(tb), opts...)
}

// PostgresAt opens a migrated store on dsn, for a test that needs the DSN:
// to open a second pool on it, or to reach it through a proxy.
func PostgresAt(tb testing.TB, dsn string, opts ...postgres.Options) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), dsn, one(tb, opts))
	return Migrated(tb, s, err)
}

// Migrated takes a store just opened, and err from opening it: it fails
// the test on err, closes s when the test ends, and migrates it.
func Migrated[S Store](tb testing.TB, s S, err error) S {
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

// one is the options given, or the zero ones.
func one[O any](tb testing.TB, opts []O) O {
	tb.Helper()
	var o O
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		tb.Fatalf("dbtest: %d sets of options, want at most one", len(opts))
	}
	return o
}

// The kinds of store, as Each names its subtests and DB.Kind says.
const (
	KindSQLite   = "sqlite"
	KindPostgres = "postgres"
)

// DB is a database of one kind, of a test's own: new and empty until a
// store opens on it.
type DB struct {
	// Kind is KindSQLite or KindPostgres.
	Kind string
	// DSN names the database as idemgate's configuration and its --store
	// flag do: sqlite:PATH, or the PostgreSQL URL.
	DSN string

	path string // SQLite's file
}

// SQLiteDB returns a new SQLite database, a file not yet created in a
// directory of the test's own.
func SQLiteDB(tb testing.TB) DB {
	path := filepath.Join(tb.TempDir(), "ledger.db")
	return DB{Kind: KindSQLite, DSN: "sqlite:" + path, path: path}
}

// PostgresDB returns a new PostgreSQL database: a schema of the test's
// own, migrated and without a row (see PostgresMigratedDSN).
func PostgresDB(tb testing.TB) DB {
	tb.Helper()
	return DB{Kind: KindPostgres, DSN: PostgresMigratedDSN(tb)}
}

// Options are the options DB.Open passes to a store of either kind.
type Options struct {
	SQLite   sqlite.Options
	Postgres postgres.Options
}

// Open opens a migrated handle on the database, closed when tb ends, with
// opts if given. Each call opens another, as another process or gateway
// instance would have.
func (db DB) Open(tb testing.TB, opts ...Options) ledger.Store {
	tb.Helper()
	o := one(tb, opts)
	if db.Kind == KindSQLite {
		return SQLiteAt(tb, db.path, o.SQLite)
	}
	return PostgresAt(tb, db.DSN, o.Postgres)
}

// runner is *testing.T or *testing.B: a test that runs subtests like
// itself.
type runner[T any] interface {
	testing.TB
	Run(name string, f func(T)) bool
}

// Each runs fn in a subtest per kind of store, "sqlite" then "postgres",
// each on a new, empty database of its own: db.Open opens (and migrates)
// a store on it. The PostgreSQL subtest skips, or fails under CI, when
// the server is unreachable.
func Each[T runner[T]](t T, fn func(t T, db DB)) {
	t.Run(KindSQLite, func(t T) { fn(t, SQLiteDB(t)) })
	t.Run(KindPostgres, func(t T) { fn(t, PostgresDB(t)) })
}
