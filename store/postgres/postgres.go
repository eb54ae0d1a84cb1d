// Package postgres is the ledger.Store for several gateway instances sharing
// one PostgreSQL database. Every step is a single SQL statement (a
// conditional write and its history row in one CTE), so each is atomic and
// costs one round trip and at most one commit. Every commit waits for the
// disk (synchronous_commit as the server has it, on by default); the
// server's own group commit lets concurrent steps share the wait.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

var _ ledger.Store = (*Store)(nil)

// Store is a ledger.Store on a pgx pool.
type Store struct {
	// Steps are the ledger's steps, on the store's own connections (see
	// poolExec).
	steps.Steps
	pool     *pgxpool.Pool
	schema   string
	relaxed  bool
	batch    *batcher
	lockWait string // lockWait, but for the tests that hold a batch
	// batchTimeout is batchTimeout, but for the tests of a silent server.
	batchTimeout time.Duration
	commits      ledger.CommitCounter // the batcher's transactions
}

// CommitStats implements ledger.Store: the batcher's step transactions,
// each a pipeline that ends in one commit (a step run alone after its
// batch failed is one of its own).
func (s *Store) CommitStats() ledger.CommitStats { return s.commits.Stats() }

// Options tune Open. Zero values take the defaults.
type Options struct {
	// Schema holds idemgate's tables; it is created by Migrate if missing.
	// Default: the search_path of the DSN, else the server's current schema.
	Schema string
	// MaxConns bounds the pool (default: pgxpool's, the greater of 4 and the
	// number of CPUs).
	MaxConns int32
	// Tracer, if set, sees every statement (for metrics, tracing, and the
	// test that proves the common path is two statements).
	Tracer pgx.QueryTracer
	// Relaxed (durability=relaxed in the DSN) lets an owner's completion,
	// release or move to unknown commit without waiting for the disk
	// (synchronous_commit off for that statement alone): a server crash may
	// then turn an answered operation unknown, never into a second effect.
	// Reservations always wait. Never the default.
	Relaxed bool
	// Batches bounds the step transactions in flight at once (batches=N
	// in the DSN; default 1): steps that arrive meanwhile share the next
	// one. One is best when the server has few cores; a server with many
	// may take more.
	Batches int
}

// identifier is a schema name that needs no quoting: search_path would fold
// any capital to lower case, and the schema would not be found.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects to dsn (postgres://…) and checks that the server answers.
// It does not migrate; call Migrate.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	dsn, params, err := ownParams(dsn)
	if err != nil {
		return nil, err
	}
	opts.Relaxed = opts.Relaxed || params.relaxed
	if opts.Batches <= 0 {
		opts.Batches = params.batches
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	schema := opts.Schema
	if schema == "" {
		schema = cfg.ConnConfig.RuntimeParams["search_path"]
	}
	if schema != "" {
		if !identifier.MatchString(schema) {
			return nil, fmt.Errorf("postgres: schema %q: want a lower-case identifier", schema)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	if !opts.Relaxed {
		cfg.AfterConnect = waitForTheDisk
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, mapErr("open", err)
	}
	if err := mapErr("ping", pool.Ping(ctx)); err != nil {
		pool.Close()
		return nil, err
	}
	if opts.Batches <= 0 {
		opts.Batches = 1
	}
	s := &Store{pool: pool, schema: schema, relaxed: opts.Relaxed, lockWait: lockWait, batchTimeout: batchTimeout}
	s.Steps = steps.On(poolExec{s})
	s.batch = newBatcher(s, min(opts.Batches, int(cfg.MaxConns)))
	return s, nil
}

// waitForTheDisk makes a strict store's connections wait for the disk at
// every commit even where the server, the database or the role defaults
// to synchronous_commit = off: durability is the store's promise, not the
// server's configuration. A stronger setting (remote_apply, say) is kept.
func waitForTheDisk(ctx context.Context, conn *pgx.Conn) error {
	var mode string
	if err := conn.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&mode); err != nil {
		return fmt.Errorf("postgres: read synchronous_commit: %w", err)
	}
	if mode != "off" {
		return nil
	}
	if _, err := conn.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		return fmt.Errorf("postgres: set synchronous_commit: %w", err)
	}
	return nil
}

// dsnParams are idemgate's own DSN parameters, which the server would
// refuse as unknown settings.
type dsnParams struct {
	relaxed bool // durability=relaxed
	batches int  // batches=N
}

// ownParams takes durability=strict|relaxed and batches=N out of a DSN.
func ownParams(dsn string) (string, dsnParams, error) {
	var p dsnParams
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn, p, nil // pgx reports a DSN it cannot parse
	}
	q := u.Query()
	if !q.Has("durability") && !q.Has("batches") {
		return dsn, p, nil
	}
	switch d := q.Get("durability"); d {
	case "", "strict":
	case "relaxed":
		p.relaxed = true
	default:
		return "", p, fmt.Errorf("postgres: durability %q: want strict or relaxed", d)
	}
	if b := q.Get("batches"); b != "" {
		if p.batches, err = strconv.Atoi(b); err != nil || p.batches < 1 || p.batches > 64 {
			return "", p, fmt.Errorf("postgres: batches %q: want 1 to 64", b)
		}
	}
	q.Del("durability")
	q.Del("batches")
	u.RawQuery = q.Encode()
	return u.String(), p, nil
}

// healthSQL is the write Ping makes: one row, rewritten and committed.
const healthSQL = `INSERT INTO idem_health (id, checked_at) VALUES (1, now())
	ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at`

// Ping checks that the server answers and commits a write: a server that
// answers but cannot write (a read-only standby, a full disk) is not ready.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, healthSQL)
	return mapErr("ping", err)
}

// Close lets the batches in flight finish and releases the pool.
func (s *Store) Close() error {
	s.batch.close()
	s.pool.Close()
	return nil
}

// mapErr turns driver errors into domain errors at the store boundary:
// no rows is ErrNotFound, a server or network that cannot be reached is
// ErrUnavailable, and context errors stay what they are.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	var netErr net.Error
	var connErr *pgconn.ConnectError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", op, ledger.ErrNotFound)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	case errors.As(err, &pgErr):
		switch {
		case unavailableClass(pgErr.Code):
			return fmt.Errorf("%s: %w: %w", op, ledger.ErrUnavailable, err)
		case pgErr.Code == "23505" && pgErr.ConstraintName == "idem_operations_concurrency":
			return fmt.Errorf("%s: %w", op, ledger.ErrConcurrencyLocked)
		case pgErr.Code == "42P01": // undefined_table
			return fmt.Errorf("%s: %w", op, ledger.ErrNoSchema)
		case pgErr.Code == "22021", pgErr.Code == "22P05":
			// A character text cannot hold (NUL, bytes that are not
			// UTF-8): every value written is checked first (ledger), so
			// it is a value looked up, and no row holds it.
			return fmt.Errorf("%s: %w: %w", op, ledger.ErrNotFound, quiet{pgErr})
		case pgErr.Code[:2] == "22", pgErr.Code[:2] == "23":
			// Data exceptions and integrity violations: values the checks
			// in ledger should have refused, refused by the database instead.
			return fmt.Errorf("%s: %w: %w", op, ledger.ErrInvalid, quiet{pgErr})
		}
		return fmt.Errorf("%s: %w", op, err)
	case errors.As(err, &connErr), pgconn.SafeToRetry(err), errors.Is(err, puddle.ErrClosedPool):
		// Never sent: nothing was made.
		return fmt.Errorf("%s: %w: %w", op, ledger.ErrUnavailable, err)
	case errors.As(err, &netErr), pgconn.Timeout(err), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, net.ErrClosed), isConnClosed(err):
		// A connection lost in the middle of a step: whether the step
		// committed is unknown to this call; owner steps and reservations
		// repeated with their identity recognise their own commit, and an
		// orphaned reservation becomes unknown when its lease lapses,
		// never a second effect.
		return fmt.Errorf("%s: %w: %w: %w", op, ledger.ErrUnavailable, ledger.ErrReplyLost, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// quiet is a refusal of the database, kept in the chain (errors.As finds
// the PgError) but said in its own words: the driver's may quote a value
// of the request, and an invalid_command shows a caller the error's text.
type quiet struct{ err *pgconn.PgError }

func (q quiet) Error() string { return "a value the database refuses" }
func (q quiet) Unwrap() error { return q.err }

// unavailableClass reports whether a server error means the server cannot
// do the work now, rather than that the request was wrong: connection
// exceptions (08), insufficient resources (53: disk full, out of memory,
// too many connections), operator intervention (57P: shutdown, crash
// recovery), system errors (58: I/O), and a read-only transaction on a
// standby (25006).
func unavailableClass(code string) bool {
	switch {
	case len(code) < 5:
		return false
	case code[:2] == "08", code[:2] == "53", code[:2] == "58", code[:3] == "57P", code == "25006":
		return true
	}
	return false
}

// isConnClosed recognises pgconn's "conn closed" error, which has no
// exported type: the connection was closed under the step.
func isConnClosed(err error) bool {
	return strings.Contains(err.Error(), "conn closed")
}

// Relaxed reports whether the store was opened with durability=relaxed.
func (s *Store) Relaxed() bool { return s.relaxed }
