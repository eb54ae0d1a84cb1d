// Package sqlite is the embedded ledger.Store: one file, no server, no cgo
// (modernc.org/sqlite). WAL lets readers run beside the single writer
// connection through which every step goes, each step one IMMEDIATE
// transaction: atomic, and one commit. With synchronous=FULL (the default) an
// acknowledged reservation survives power loss.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgate/idemgate/ledger"
)

var _ ledger.Store = (*Store)(nil)

// Store is a ledger.Store on one SQLite file.
type Store struct {
	write      *sql.DB // one connection: SQLite has one writer anyway
	read       *sql.DB
	writeStmts *stmtCache
	readStmts  *stmtCache
	now        func() time.Time
	sync       string     // the configured synchronous mode
	writer     sync.Mutex // one statement (or relaxed statement) at a time
}

// Options tune Open.
type Options struct {
	// Synchronous is SQLite's synchronous pragma: FULL (default) makes every
	// commit durable before it is acknowledged; NORMAL may lose the last
	// commits on power loss (never on a process crash); OFF is for tests.
	Synchronous string
	// Readers bounds the read connections (default 4).
	Readers int
	// BusyTimeout is how long a writer waits for another process's write
	// lock (default 10s).
	BusyTimeout time.Duration
	// MustExist refuses to create the file: for commands that only read.
	MustExist bool
}

// ParseDSN reads "sqlite:PATH[?synchronous=MODE]" (a bare path is accepted).
func ParseDSN(dsn string) (path string, opts Options, err error) {
	rest := strings.TrimPrefix(dsn, "sqlite:")
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return "", opts, errors.New("sqlite: empty path in dsn")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", opts, fmt.Errorf("sqlite: dsn query: %w", err)
	}
	for k := range q {
		if k != "synchronous" {
			return "", opts, fmt.Errorf("sqlite: unknown dsn parameter %q (known: synchronous)", k)
		}
	}
	opts.Synchronous = q.Get("synchronous")
	return path, opts, nil
}

var synchronousModes = []string{"OFF", "NORMAL", "FULL", "EXTRA"}

// Open opens (creating if needed) the database file at path. It does not
// migrate; call Migrate.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	mode := strings.ToUpper(opts.Synchronous)
	if mode == "" {
		mode = "FULL"
	}
	if !slices.Contains(synchronousModes, mode) {
		return nil, fmt.Errorf("sqlite: synchronous %q: want one of %v", opts.Synchronous, synchronousModes)
	}
	if opts.MustExist {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("sqlite: no store at %s: %w", path, ledger.ErrNoSchema)
		}
	}
	if opts.Readers <= 0 {
		opts.Readers = 4
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	base := "file:" + uriPath.Replace(path) + "?_pragma=busy_timeout(" + fmt.Sprint(opts.BusyTimeout.Milliseconds()) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(" + mode + ")"
	write, err := sql.Open("sqlite", base+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetConnMaxIdleTime(0)
	read, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	read.SetMaxOpenConns(opts.Readers)
	s := &Store{write: write, read: read, writeStmts: newStmtCache(write), readStmts: newStmtCache(read),
		now: func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }, sync: mode}
	if err := s.firstPing(ctx, opts.BusyTimeout); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// uriPath escapes what a file: URI would read as syntax in a path.
var uriPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// firstPing opens the connections, retrying while another process holds
// the file: switching a new database to WAL does not wait on the busy
// handler, so two processes creating one store at once can collide.
func (s *Store) firstPing(ctx context.Context, patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
		err := s.Ping(ctx)
		if err == nil || !errors.Is(err, ledger.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Ping checks that both the writer and a reader answer.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.write.PingContext(ctx); err != nil {
		return mapErr("ping", err)
	}
	return mapErr("ping", s.read.PingContext(ctx))
}

// Close closes the statements and both pools.
func (s *Store) Close() error {
	return errors.Join(s.writeStmts.close(), s.readStmts.close(), s.write.Close(), s.read.Close())
}

// tx runs fn in one IMMEDIATE transaction on the writer: all of it commits,
// or none of it. Steps are single statements; only Migrate needs this.
func (s *Store) tx(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(op, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return mapErr(op, tx.Commit())
}

// mapErr turns driver errors into domain errors at the store boundary.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *sqlite.Error
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%s: %w", op, ledger.ErrNotFound)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, sql.ErrConnDone), err.Error() == "sql: database is closed": // database/sql exports no sentinel
		return fmt.Errorf("%s: %w: %w", op, ledger.ErrUnavailable, err)
	case errors.As(err, &se) && strings.Contains(se.Error(), "idem_operations.concurrency_key"):
		return fmt.Errorf("%s: %w", op, ledger.ErrConcurrencyLocked)
	case errors.As(err, &se) && strings.Contains(se.Error(), "no such table"):
		return fmt.Errorf("%s: %w", op, ledger.ErrNoSchema)
	case errors.As(err, &se):
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY:
			return fmt.Errorf("%s: %w: %w", op, ledger.ErrUnavailable, err)
		case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_RANGE:
			return fmt.Errorf("%s: %w: %w", op, ledger.ErrInvalid, err)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}
