package postgres_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/ledger/storetest"
	"github.com/idemgate/idemgate/store/postgres"
)

// mu guards dsns and businessPools: the conformance suite's subtests run
// in parallel.
var mu sync.Mutex

// dsns remembers which DSN each store was opened on, for Another.
var dsns = map[ledger.Store]string{}

// sent counts the commits of every store these tests open.
var sent postgres.CommitLog

func open(tb testing.TB, dsn string) *postgres.Store {
	tb.Helper()
	s := dbtest.PostgresAt(tb, dsn, postgres.Options{Tracer: &sent})
	mu.Lock()
	defer mu.Unlock()
	dsns[s] = dsn
	return s
}

// dsnOf is the DSN s was opened on.
func dsnOf(s ledger.Store) string {
	mu.Lock()
	defer mu.Unlock()
	return dsns[s]
}

// fresh opens a store on a schema of the test's own, migrated and empty.
func fresh(tb testing.TB) *postgres.Store {
	return open(tb, dbtest.PostgresMigratedDSN(tb))
}

var backend = storetest.Backend{
	Fresh:   func(tb testing.TB) ledger.Store { return fresh(tb) },
	Another: func(tb testing.TB, s ledger.Store) ledger.Store { return open(tb, dsnOf(s)) },
	Commits: sent.N.Load,
	Begin:   begin,
	Rows: func(tb testing.TB, s ledger.Store, id string) (n int) {
		err := business(tb, s).QueryRow(context.Background(), `SELECT count(*) FROM biz WHERE id = $1`, id).Scan(&n)
		if err != nil {
			tb.Fatal(err)
		}
		return n
	},
}

// businessPools is each store's business pool: a service's own pool on
// the store's database, as a Go service keeps its data beside the ledger.
var businessPools = map[ledger.Store]*pgxpool.Pool{}

func business(tb testing.TB, s ledger.Store) *pgxpool.Pool {
	mu.Lock()
	defer mu.Unlock()
	if p, ok := businessPools[s]; ok {
		return p
	}
	p, err := pgxpool.New(context.Background(), dsns[s])
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Close()
		mu.Lock()
		defer mu.Unlock()
		delete(businessPools, s)
	})
	if _, err := p.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS biz (id text PRIMARY KEY)`); err != nil {
		tb.Fatal(err)
	}
	businessPools[s] = p
	return p
}

// begin opens a business transaction with the store's steps bound to it.
func begin(tb testing.TB, s ledger.Store) storetest.Tx {
	ctx := context.Background()
	tx, err := business(tb, s).Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return storetest.Tx{Steps: s.(*postgres.Store).Tx(tx),
		Write: func(id string) error {
			_, err := tx.Exec(ctx, `INSERT INTO biz (id) VALUES ($1)`, id)
			return err
		},
		Commit:   func() error { return tx.Commit(ctx) },
		Rollback: func() error { return tx.Rollback(ctx) }}
}

func TestConformance(t *testing.T) { storetest.Run(t, backend) }

func openMigrated(ctx context.Context, dsn string) (ledger.Store, error) {
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		return nil, err
	}
	return s, s.Migrate(ctx)
}

func TestMain(m *testing.M) {
	if storetest.IsChild() {
		storetest.Child(openMigrated)
		return
	}
	m.Run()
}

// TestRaceProcesses: two OS processes, each with its own pool, migrate a
// fresh schema and race for the same keys at the same moment.
func TestRaceProcesses(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.PostgresSchema(t)
	storetest.RaceProcesses(t, dsn, 2)
}
