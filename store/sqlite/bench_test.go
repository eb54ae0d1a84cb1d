package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemgate/idemgate/ledger/storetest"
	"github.com/idemgate/idemgate/store/sqlite"
)

// floor is the hand-written equivalent of the common path on the same file,
// with the same pragmas (WAL, synchronous=FULL) and one writer connection:
// INSERT … ON CONFLICT DO NOTHING and an UPDATE, each its own commit.
type floor struct{ db *sql.DB }

func newFloor(b *testing.B, path string) floor {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"+
		"&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE raw_ops (tenant TEXT NOT NULL, key TEXT NOT NULL,
		fingerprint TEXT NOT NULL, state TEXT NOT NULL, lease_until INTEGER, response_status INTEGER,
		response_body BLOB, PRIMARY KEY (tenant, key))`); err != nil {
		b.Fatal(err)
	}
	return floor{db}
}

func (f floor) Lifecycle(ctx context.Context, tenant, key string, status int, body []byte) error {
	if _, err := f.db.ExecContext(ctx, `INSERT INTO raw_ops (tenant, key, fingerprint, state, lease_until)
		VALUES (?, ?, 'sha256:5f1c0a', 'executing', unixepoch('subsec') * 1000000 + 30000000)
		ON CONFLICT (tenant, key) DO NOTHING`, tenant, key); err != nil {
		return err
	}
	_, err := f.db.ExecContext(ctx, `UPDATE raw_ops SET state = 'succeeded', lease_until = NULL,
		response_status = ?, response_body = ? WHERE tenant = ? AND key = ?`, status, body, tenant, key)
	return err
}

func (f floor) Lookup(ctx context.Context, tenant, key string) error {
	var status int
	var body []byte
	return f.db.QueryRowContext(ctx, `SELECT response_status, response_body FROM raw_ops
		WHERE tenant = ? AND key = ?`, tenant, key).Scan(&status, &body)
}

func benchPair(b *testing.B) (*sqlite.Store, floor) {
	dir := b.TempDir()
	return open(b, filepath.Join(dir, "ledger.db"), sqlite.Options{}), newFloor(b, filepath.Join(dir, "raw.db"))
}

// BenchmarkLifecycle: reserve-with-lease + complete, against the floor.
func BenchmarkLifecycle(b *testing.B) {
	s, f := benchPair(b)
	storetest.BenchLifecycle(b, s, f)
}

// BenchmarkReplay: get a completed operation by (tenant, key), against the
// floor's SELECT.
func BenchmarkReplay(b *testing.B) {
	s, f := benchPair(b)
	storetest.BenchReplay(b, s, f)
}
