package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPostgres is used when IDEMGATE_TEST_POSTGRES is unset.
const DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// PostgresURL returns the server the tests use.
func PostgresURL() string {
	if v := os.Getenv("IDEMGATE_TEST_POSTGRES"); v != "" {
		return v
	}
	return DefaultPostgres
}

var (
	probeOnce sync.Once
	probeErr  error
)

// RequirePostgres fails the test under CI when the server cannot be reached,
// and skips it elsewhere, saying once, loudly, how to enable it.
func RequirePostgres(tb testing.TB) {
	tb.Helper()
	probeOnce.Do(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(c, PostgresURL())
		if err != nil {
			probeErr = err
			if !InCI() {
				fmt.Fprintf(os.Stderr, "\n*** PostgreSQL tests SKIPPED: %v\n*** start PostgreSQL or set IDEMGATE_TEST_POSTGRES=postgres://… to run them\n\n", err)
			}
			return
		}
		probeErr = conn.Close(c)
	})
	if probeErr == nil {
		return
	}
	if InCI() {
		tb.Fatalf("PostgreSQL unreachable at %s under CI=true: %v", PostgresURL(), probeErr)
	}
	tb.Skipf("PostgreSQL unreachable: %v", probeErr)
}

// PostgresSchema creates an empty schema of the test's own, dropped when the
// test ends, and returns a DSN whose search_path selects it.
func PostgresSchema(tb testing.TB) (dsn, schema string) {
	tb.Helper()
	RequirePostgres(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema = "t_" + hex.EncodeToString(b[:])
	execSQL(tb, "CREATE SCHEMA "+schema)
	tb.Cleanup(func() { execSQL(tb, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	u, err := url.Parse(PostgresURL())
	if err != nil {
		tb.Fatalf("IDEMGATE_TEST_POSTGRES: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

func execSQL(tb testing.TB, sql string) {
	tb.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(c, PostgresURL())
	if err != nil {
		tb.Fatalf("postgres: %v", err)
	}
	defer conn.Close(c)
	if _, err := conn.Exec(c, sql); err != nil {
		tb.Fatalf("postgres: %s: %v", sql, err)
	}
}

// Querier is a pgx connection or pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// WaitLockWait waits until some session of the database waits on a lock:
// a statement the test made wait is then inside the server.
func WaitLockWait(tb testing.TB, conn Querier) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n); err != nil {
			tb.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal("no statement ever waited on a lock")
		}
	}
}

// Held is a session of its own with a transaction left open: what a test
// needs to make a statement of the code under test wait inside the server.
type Held struct {
	Conn *pgx.Conn
	tx   pgx.Tx
	once sync.Once
}

// Hold opens a session on dsn and runs sql in a transaction it leaves
// open, holding whatever sql locked, until Release or the test's end.
func Hold(tb testing.TB, dsn, sql string, args ...any) *Held {
	tb.Helper()
	c := context.Background()
	conn, err := pgx.Connect(c, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tx, err := conn.Begin(c)
	if err != nil {
		conn.Close(c)
		tb.Fatal(err)
	}
	h := &Held{Conn: conn, tx: tx}
	tb.Cleanup(h.Release)
	if _, err := tx.Exec(c, sql, args...); err != nil {
		tb.Fatal(err)
	}
	return h
}

// Release rolls the transaction back and closes the session; again, it
// does nothing.
func (h *Held) Release() {
	h.once.Do(func() {
		c := context.Background()
		_ = h.tx.Rollback(c)
		_ = h.Conn.Close(c)
	})
}
