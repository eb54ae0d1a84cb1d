package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger/storetest"
)

// floor is the hand-written equivalent of the common path on the same
// server and schema, through a pool of the same size: a table keyed by
// (tenant, key), one INSERT … ON CONFLICT DO NOTHING and one UPDATE, each
// its own commit.
type floor struct{ pool *pgxpool.Pool }

func newFloor(b *testing.B, dsn string) floor {
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	_, err = pool.Exec(context.Background(), `CREATE TABLE raw_ops (
		tenant text NOT NULL, key text NOT NULL, fingerprint text NOT NULL, state text NOT NULL,
		lease_until timestamptz, response_status integer, response_body bytea,
		PRIMARY KEY (tenant, key))`)
	if err != nil {
		b.Fatal(err)
	}
	return floor{pool}
}

func (f floor) Lifecycle(ctx context.Context, tenant, key string, status int, body []byte) error {
	if _, err := f.pool.Exec(ctx, `INSERT INTO raw_ops (tenant, key, fingerprint, state, lease_until)
		VALUES ($1, $2, 'sha256:5f1c0a', 'executing', now() + interval '30 seconds')
		ON CONFLICT (tenant, key) DO NOTHING`, tenant, key); err != nil {
		return err
	}
	_, err := f.pool.Exec(ctx, `UPDATE raw_ops SET state = 'succeeded', lease_until = NULL,
		response_status = $3, response_body = $4 WHERE tenant = $1 AND key = $2`, tenant, key, status, body)
	return err
}

func (f floor) Lookup(ctx context.Context, tenant, key string) error {
	var status int
	var body []byte
	return f.pool.QueryRow(ctx, `SELECT response_status, response_body FROM raw_ops
		WHERE tenant = $1 AND key = $2`, tenant, key).Scan(&status, &body)
}

// BenchmarkLifecycle: reserve-with-lease + complete, against the floor.
func BenchmarkLifecycle(b *testing.B) {
	dsn, _ := testenv.PostgresSchema(b)
	storetest.BenchLifecycle(b, open(b, dsn), newFloor(b, dsn))
}

// BenchmarkReplay: get a completed operation by (tenant, key), against the
// floor's SELECT.
func BenchmarkReplay(b *testing.B) {
	dsn, _ := testenv.PostgresSchema(b)
	storetest.BenchReplay(b, open(b, dsn), newFloor(b, dsn))
}
