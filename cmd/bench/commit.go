package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/ledger"
)

// commitSamples is how many durable commits of each kind make a commit
// latency (spread over the rounds of the c=1 new-key measurement): the unit
// the overhead of a new key is judged in.
const commitSamples = 300

// probe makes one durable commit of some kind; i numbers the calls.
type probe func(i int) error

// commitProbes are a store's two commit latencies: a one-row commit by
// hand (raw), and one ledger step, a reservation (step).
type commitProbes struct{ raw, step probe }

// sqliteCommit is a one-row commit that waits for the disk (WAL,
// synchronous=FULL) in dir.
func sqliteCommit(dir string) (probe, func(), error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "commit.db")+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (n INTEGER)`); err != nil {
		db.Close()
		return nil, nil, err
	}
	return func(i int) error {
		_, err := db.Exec(`INSERT INTO t (n) VALUES (?)`, i)
		return err
	}, func() { db.Close() }, nil
}

// postgresCommit is a one-row commit on the server (synchronous_commit as
// the server has it).
func postgresCommit(ctx context.Context, pool *pgxpool.Pool) (probe, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE commit_probe (n integer)`); err != nil {
		return nil, err
	}
	return func(i int) error {
		_, err := pool.Exec(ctx, `INSERT INTO commit_probe (n) VALUES ($1)`, i)
		return err
	}, nil
}

// stepCommit is one ledger step that commits on store: a reservation,
// which writes the operation, its indexes and its first history row, and
// waits for the disk.
func stepCommit(store ledger.Store) probe {
	ctx := context.Background()
	return func(i int) error {
		_, err := store.Reserve(ctx, ledger.ReserveParams{Tenant: "commit-probe", Namespace: ledger.NamespaceClients,
			Key: fmt.Sprint("probe-", i, "-", time.Now().UnixNano()), Kind: ledger.KindRoute, Route: "/probe",
			Fingerprint: "sha256:0", Lease: time.Minute, Retention: time.Minute, Actor: "bench"})
		return err
	}
}

// timed runs p k times from i and returns each latency.
func timed(p probe, i, k int) ([]time.Duration, error) {
	lat := make([]time.Duration, k)
	for j := range lat {
		t0 := time.Now()
		if err := p(i + j); err != nil {
			return nil, err
		}
		lat[j] = time.Since(t0)
	}
	return lat, nil
}
