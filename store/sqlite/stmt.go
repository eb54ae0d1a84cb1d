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
	st, err := s.writeStmts.get(ctx, query)
	if err != nil {
		return errRow{err}
	}
	return drainedRow{ctx: ctx, st: st, args: args}
}

// drainedRow steps its statement to the end before closing it. Reset early,
// as QueryRow does after the first row, an INSERT … RETURNING leaves the
// WAL pinned: it is never reset, and grows by every commit (see
// TestWALStaysBounded).
type drainedRow struct {
	ctx  context.Context
	st   *sql.Stmt
	args []any
}

func (r drainedRow) Scan(dest ...any) error {
	rows, err := r.st.QueryContext(r.ctx, r.args...)
	if err != nil {
		return err
	}
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
