package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/contract"
)

// floorStore is the raw floor's SQL, by hand: a table keyed by (tenant,
// key), one INSERT … ON CONFLICT DO NOTHING and one UPDATE, two commits
// that both wait for the disk; one SELECT for a replay. No history, no
// fencing, no leases, no domain code.
type floorStore interface {
	insert(ctx context.Context, key, fp string) (bool, error)
	complete(ctx context.Context, key string, status int, body []byte) error
	lookup(ctx context.Context, key string) (int, []byte, error)
}

// floorProxy is the hand-written idempotency proxy the gateway is measured
// against: reserve (commit), forward, record (commit), answer.
type floorProxy struct {
	store    floorStore
	upstream string
	client   *http.Client
}

func (f *floorProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	key := r.Header.Get(contract.HeaderKey)
	body, err := io.ReadAll(r.Body)
	if err != nil || key == "" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	sum := sha256.Sum256(body)
	created, err := f.store.insert(ctx, key, hex.EncodeToString(sum[:]))
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if !created {
		status, stored, err := f.store.lookup(ctx, key)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write(stored)
		return
	}
	status, answer, err := f.forward(ctx, body)
	if err == nil {
		err = f.store.complete(ctx, key, status, answer)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

func (f *floorProxy) forward(ctx context.Context, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", f.upstream+"/v1/tickets", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// sqliteFloor is the floor on SQLite, with the store's own settings: WAL,
// synchronous=FULL, one writer connection, and (process-wide, once a store
// is open) commits synced with fdatasync.
type sqliteFloor struct{ db *sql.DB }

func openSQLiteFloor(path string) (*sqliteFloor, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"+
		"&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`CREATE TABLE raw_ops (tenant TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
		state TEXT NOT NULL, response_status INTEGER, response_body BLOB, PRIMARY KEY (tenant, key))`)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &sqliteFloor{db}, nil
}

func (f *sqliteFloor) insert(ctx context.Context, key, fp string) (bool, error) {
	res, err := f.db.ExecContext(ctx, `INSERT INTO raw_ops (tenant, key, fingerprint, state)
		VALUES ('bench', ?, ?, 'executing') ON CONFLICT (tenant, key) DO NOTHING`, key, fp)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (f *sqliteFloor) complete(ctx context.Context, key string, status int, body []byte) error {
	_, err := f.db.ExecContext(ctx, `UPDATE raw_ops SET state = 'succeeded', response_status = ?, response_body = ?
		WHERE tenant = 'bench' AND key = ?`, status, body, key)
	return err
}

func (f *sqliteFloor) lookup(ctx context.Context, key string) (status int, body []byte, err error) {
	err = f.db.QueryRowContext(ctx, `SELECT response_status, response_body FROM raw_ops
		WHERE tenant = 'bench' AND key = ?`, key).Scan(&status, &body)
	return status, body, err
}

// postgresFloor is the floor on PostgreSQL, through a pool as large as the
// gateway's.
type postgresFloor struct{ pool *pgxpool.Pool }

func openPostgresFloor(ctx context.Context, dsn string) (*postgresFloor, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE raw_ops (tenant text NOT NULL, key text NOT NULL, fingerprint text NOT NULL,
		state text NOT NULL, response_status integer, response_body bytea, PRIMARY KEY (tenant, key))`)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &postgresFloor{pool}, nil
}

func (f *postgresFloor) insert(ctx context.Context, key, fp string) (bool, error) {
	tag, err := f.pool.Exec(ctx, `INSERT INTO raw_ops (tenant, key, fingerprint, state)
		VALUES ('bench', $1, $2, 'executing') ON CONFLICT (tenant, key) DO NOTHING`, key, fp)
	return tag.RowsAffected() == 1, err
}

func (f *postgresFloor) complete(ctx context.Context, key string, status int, body []byte) error {
	_, err := f.pool.Exec(ctx, `UPDATE raw_ops SET state = 'succeeded', response_status = $2, response_body = $3
		WHERE tenant = 'bench' AND key = $1`, key, status, body)
	return err
}

func (f *postgresFloor) lookup(ctx context.Context, key string) (status int, body []byte, err error) {
	err = f.pool.QueryRow(ctx, `SELECT response_status, response_body FROM raw_ops
		WHERE tenant = 'bench' AND key = $1`, key).Scan(&status, &body)
	return status, body, err
}
