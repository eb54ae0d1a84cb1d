package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/ledger"
)

// commitSamples is how many single-row durable commits make a commit
// latency: the unit the overhead of a new key is judged in.
const commitSamples = 300

// sqliteCommit is the median latency of a one-row commit that waits for
// the disk (WAL, synchronous=FULL) in dir.
func sqliteCommit(dir string) (time.Duration, error) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "commit.db")+
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (n INTEGER)`); err != nil {
		return 0, err
	}
	return median(func(i int) error {
		_, err := db.Exec(`INSERT INTO t (n) VALUES (?)`, i)
		return err
	})
}

// postgresCommit is the median latency of a one-row commit on the server
// (synchronous_commit as the server has it).
func postgresCommit(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE commit_probe (n integer)`); err != nil {
		return 0, err
	}
	return median(func(i int) error {
		_, err := pool.Exec(ctx, `INSERT INTO commit_probe (n) VALUES ($1)`, i)
		return err
	})
}

func median(fn func(i int) error) (time.Duration, error) {
	lat := make([]time.Duration, commitSamples)
	for i := range lat {
		t0 := time.Now()
		if err := fn(i); err != nil {
			return 0, err
		}
		lat[i] = time.Since(t0)
	}
	slices.Sort(lat)
	return lat[len(lat)/2], nil
}

// stepCommit is the median latency of one ledger step that commits on
// store: a reservation, which writes the operation, its indexes and its
// first history row, and waits for the disk.
func stepCommit(store ledger.Store) (time.Duration, error) {
	ctx := context.Background()
	return median(func(i int) error {
		_, err := store.Reserve(ctx, ledger.ReserveParams{Tenant: "commit-probe", Key: fmt.Sprint("probe-", i, "-",
			time.Now().UnixNano()), Route: "/probe", Fingerprint: "sha256:0", Lease: time.Minute,
			Retention: time.Minute, Actor: "bench"})
		return err
	})
}
