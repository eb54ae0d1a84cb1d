package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// errNoRows is what a guarded statement that matched nothing returns.
var errNoRows = sql.ErrNoRows

// querier runs statements: the writer's connection inside a batch, a
// caller's transaction (Tx), or the reader pool.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// stmtCache keeps each statement prepared once: with an embedded
// database, parsing the SQL costs more than running it.
type stmtCache struct {
	prep func(ctx context.Context, query string) (*sql.Stmt, error)
	mu   sync.Mutex
	m    map[string]*sql.Stmt
}

func newStmtCache(prep func(context.Context, string) (*sql.Stmt, error)) *stmtCache {
	return &stmtCache{prep: prep, m: map[string]*sql.Stmt{}}
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := c.prep(ctx, query)
	if err != nil {
		return nil, err
	}
	c.m[query] = st
	return st, nil
}

// QueryContext runs a prepared statement.
func (c *stmtCache) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := c.get(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// ExecContext runs a prepared statement.
func (c *stmtCache) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := c.get(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
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

// writeConn is the writer's one connection and its statements; only the
// writer goroutine uses it.
type writeConn struct {
	*stmtCache
	conn *sql.Conn
}

func newWriteConn(c *sql.Conn) *writeConn {
	return &writeConn{stmtCache: newStmtCache(c.PrepareContext), conn: c}
}

// readPool is the reader connections and their statements; it sees only
// what batches have committed.
type readPool = stmtCache

func newReadPool(db *sql.DB) *readPool { return newStmtCache(db.PrepareContext) }

type row interface{ Scan(dest ...any) error }

// queryRow runs query on q and returns its first row, read to the end.
func queryRow(ctx context.Context, q querier, query string, args ...any) row {
	return drainedRow{ctx: ctx, q: q, query: query, args: args}
}

// drainedRow steps its statement to the end before closing it. Reset early,
// as QueryRow does after the first row, an INSERT … RETURNING leaves the
// WAL pinned: it is never reset, and grows by every commit (see
// TestWALStaysBounded).
type drainedRow struct {
	ctx   context.Context
	q     querier
	query string
	args  []any
}

func (r drainedRow) Scan(dest ...any) error {
	rows, err := r.q.QueryContext(r.ctx, r.query, r.args...)
	if err != nil {
		return err
	}
	return scanDrained(rows, dest)
}

// scanDrained scans the first row and steps the statement to its end. Every
// error the driver reports counts: while stepping, at the end (where an
// autocommitted statement commits, and SQLITE_FULL or an I/O error shows
// up), and when the rows are closed. One dropped there once turned a full
// disk into a new effect on every retry.
func scanDrained(rows *sql.Rows, dest []any) error {
	if !rows.Next() {
		return errors.Join(nonNil(rows.Err(), sql.ErrNoRows), rows.Close())
	}
	if err := rows.Scan(dest...); err != nil {
		return errors.Join(err, rows.Close())
	}
	for rows.Next() {
	}
	return errors.Join(rows.Err(), rows.Close())
}

// nonNil returns err, or fallback when err is nil.
func nonNil(err, fallback error) error {
	if err != nil {
		return err
	}
	return fallback
}
