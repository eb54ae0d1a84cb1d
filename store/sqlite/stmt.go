package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// errNoRows is what a guarded statement that matched nothing returns.
var errNoRows = sql.ErrNoRows

// stmtCache keeps each statement prepared once per pool: with an embedded
// database, parsing the SQL costs more than running it.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStmtCache(db *sql.DB) *stmtCache { return &stmtCache{db: db, m: map[string]*sql.Stmt{}} }

// get returns the statement for query, preparing it on the pool if needed.
func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.m[query] = st
	return st, nil
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	clear(c.m)
	return errors.Join(errs...)
}

type row interface{ Scan(dest ...any) error }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// writeRow runs one statement with RETURNING, in its own implicit
// transaction, on the writer and returns its first row.
func (s *Store) writeRow(ctx context.Context, query string, args ...any) row {
	return s.writeRowMode(ctx, false, query, args...)
}

// lazyWriteRow is writeRow committed without waiting for the disk: see
// the postgres store's lazy for why owner steps may be, and how.
func (s *Store) lazyWriteRow(ctx context.Context, query string, args ...any) row {
	return s.writeRowMode(ctx, s.sync != "OFF" && s.sync != "NORMAL", query, args...)
}

func (s *Store) writeRowMode(ctx context.Context, lazy bool, query string, args ...any) row {
	st, err := s.writeStmts.get(ctx, query)
	if err != nil {
		return errRow{err}
	}
	return drainedRow{ctx: ctx, s: s, st: st, args: args, lazy: lazy}
}

// drainedRow steps its statement to the end before closing it. Reset early,
// as QueryRow does after the first row, an INSERT … RETURNING leaves the
// WAL pinned: it is never reset, and grows by every commit (see
// TestWALStaysBounded).
type drainedRow struct {
	ctx  context.Context
	s    *Store
	st   *sql.Stmt
	args []any
	lazy bool
}

func (r drainedRow) Scan(dest ...any) error {
	// The writer lock keeps other statements off the connection while its
	// synchronous setting is relaxed for this one.
	r.s.writer.Lock()
	defer r.s.writer.Unlock()
	if r.lazy {
		if err := r.s.setSync(r.ctx, "NORMAL"); err != nil {
			return err
		}
		defer r.s.setSync(context.WithoutCancel(r.ctx), r.s.sync) //nolint:errcheck // a failure is caught below
	}
	rows, err := r.st.QueryContext(r.ctx, r.args...)
	if err != nil {
		return err
	}
	return scanDrained(rows, dest)
}

// scanDrained scans the first row and steps the statement to its end.
func scanDrained(rows *sql.Rows, dest []any) error {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	for rows.Next() {
	}
	return rows.Close()
}

// writeExec runs one statement on the writer and returns the rows it changed.
func (s *Store) writeExec(ctx context.Context, query string, args ...any) (int64, error) {
	s.writer.Lock()
	defer s.writer.Unlock()
	st, err := s.writeStmts.get(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// readRow runs a read statement on the reader pool.
func (s *Store) readRow(ctx context.Context, query string, args ...any) row {
	st, err := s.readStmts.get(ctx, query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

// setSync sets the writer connection's synchronous mode. If restoring the
// configured mode fails, the writer is closed rather than left relaxed.
func (s *Store) setSync(ctx context.Context, mode string) error {
	st, err := s.writeStmts.get(ctx, "PRAGMA synchronous = "+mode)
	if err == nil {
		_, err = st.ExecContext(ctx)
	}
	if err != nil && mode == s.sync {
		_ = s.write.Close()
	}
	return err
}

// txRow runs a RETURNING statement in the caller's transaction, stepped to
// the end like drainedRow.
type txRow struct {
	ctx   context.Context
	tx    *sql.Tx
	query string
	args  []any
}

func (r txRow) Scan(dest ...any) error {
	rows, err := r.tx.QueryContext(r.ctx, r.query, r.args...)
	if err != nil {
		return err
	}
	return scanDrained(rows, dest)
}
