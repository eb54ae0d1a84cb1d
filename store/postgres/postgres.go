// Package postgres is the ledger.Store for several gateway instances sharing
// one PostgreSQL database. Every step is a single SQL statement (a
// conditional write and its history row in one CTE), so each is atomic and
// costs one round trip and at most one commit.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/idemgate/idemgate/ledger"
)

var _ ledger.Store = (*Store)(nil)

// Store is a ledger.Store on a pgx pool.
type Store struct {
	pool   *pgxpool.Pool
	schema string
}

// Options tune Open. Zero values take the defaults.
type Options struct {
	// Schema holds idemgate's tables; it is created by Migrate if missing.
	// Default: the search_path of the DSN, else the server's current schema.
	Schema string
	// MaxConns bounds the pool (default: pgxpool's, 4 per CPU at least 4).
	MaxConns int32
	// Tracer, if set, sees every statement (for metrics, tracing, and the
	// test that proves the common path is two statements).
	Tracer pgx.QueryTracer
}

// identifier is a schema name that needs no quoting: search_path would fold
// any capital to lower case, and the schema would not be found.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects to dsn (postgres://…) and checks that the server answers.
// It does not migrate; call Migrate.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, mapErr("open", err)
	}
	s := &Store{pool: pool, schema: schema}
	if err := s.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	return mapErr("ping", s.pool.Ping(ctx))
}

// Close releases the pool.
func (s *Store) Close() error {
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
		case pgErr.Code[:2] == "08", pgErr.Code == "57P01", pgErr.Code == "57P03", pgErr.Code == "53300":
			return fmt.Errorf("%s: %w: %w", op, ledger.ErrUnavailable, err)
		case pgErr.Code == "23505" && pgErr.ConstraintName == "idem_operations_concurrency":
			return fmt.Errorf("%s: %w", op, ledger.ErrConcurrencyLocked)
		case pgErr.Code == "42P01": // undefined_table
			return fmt.Errorf("%s: %w", op, ledger.ErrNoSchema)
		case pgErr.Code[:2] == "22", pgErr.Code[:2] == "23":
			// Data exceptions and integrity violations: values the checks
			// in ledger should have refused, refused by the database instead.
			return fmt.Errorf("%s: %w: %w", op, ledger.ErrInvalid, err)
		}
		return fmt.Errorf("%s: %w", op, err)
	case errors.As(err, &connErr), errors.As(err, &netErr), pgconn.SafeToRetry(err),
		errors.Is(err, puddle.ErrClosedPool):
		return fmt.Errorf("%s: %w: %w", op, ledger.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
