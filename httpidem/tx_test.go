package httpidem_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// business is a service keeping its tickets in the ledger's database, and
// completing each operation in the transaction that creates the ticket.
type business struct {
	store ledger.Store
	count func() int
	inTx  func(ctx context.Context, exec *httpidem.Execution, resp *ledger.Response, commit bool) error
}

func sqliteBusiness(t *testing.T) business {
	path := filepath.Join(t.TempDir(), "app.db")
	s := dbtest.SQLiteAt(t, path)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE tickets (id INTEGER PRIMARY KEY, op TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return business{store: s,
		count: func() (n int) { db.QueryRow(`SELECT count(*) FROM tickets`).Scan(&n); return },
		inTx: func(ctx context.Context, exec *httpidem.Execution, resp *ledger.Response, commit bool) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `INSERT INTO tickets (op) VALUES (?)`, exec.OperationID()); err != nil {
				return err
			}
			if _, err := s.Tx(tx).Complete(ctx, exec.Lease(), ledger.Outcome{State: ledger.Succeeded, Response: resp}); err != nil {
				return err
			}
			if !commit {
				return fmt.Errorf("rolled back")
			}
			return tx.Commit()
		}}
}

func postgresBusiness(t *testing.T) business {
	dsn := dbtest.PostgresDSN(t)
	s := dbtest.PostgresAt(t, dsn)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE tickets (id serial PRIMARY KEY, op text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return business{store: s,
		count: func() (n int) { pool.QueryRow(context.Background(), `SELECT count(*) FROM tickets`).Scan(&n); return },
		inTx: func(ctx context.Context, exec *httpidem.Execution, resp *ledger.Response, commit bool) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `INSERT INTO tickets (op) VALUES ($1)`, exec.OperationID()); err != nil {
				return err
			}
			if _, err := s.Tx(tx).Complete(ctx, exec.Lease(), ledger.Outcome{State: ledger.Succeeded, Response: resp}); err != nil {
				return err
			}
			if !commit {
				return fmt.Errorf("rolled back")
			}
			return tx.Commit(ctx)
		}}
}

// TestCompletionInTheBusinessTransaction: the ticket and the completion
// commit together or not at all.
func TestCompletionInTheBusinessTransaction(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(*testing.T) business{"sqlite": sqliteBusiness, "postgres": postgresBusiness} {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			a := newApp(t, b.store, httpidem.Options{})
			a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
				exec := httpidem.Current(r)
				body := []byte(fmt.Sprintf(`{"ticket":%d}`, n))
				resp := &ledger.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
				if err := b.inTx(r.Context(), exec, resp, r.Header.Get("X-Fail") == ""); err != nil {
					exec.Settle(contract.FateReleased, "business_rolled_back") // nothing was written
					w.WriteHeader(503)
					return
				}
				exec.Completed()
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(201)
				w.Write(body)
			}
			first := a.post("a", "acme", `{}`)
			again := a.post("a", "acme", `{}`)
			op, _ := b.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
				Key: "a"})
			if first.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" ||
				op.State != ledger.Succeeded || b.count() != 1 {
				t.Fatalf("committed together: %+v %+v, %s, %d tickets", first, again, op.State, b.count())
			}
			failed := a.post("b", "acme", `{}`, "X-Fail", "1")
			op, _ = b.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
				Key: "b"})
			if failed.status != 503 || op.State != ledger.Prepared || b.count() != 1 {
				t.Fatalf("rolled back together: %d, %s, %d tickets", failed.status, op.State, b.count())
			}
			if r := a.post("b", "acme", `{}`); r.status != 201 || b.count() != 2 {
				t.Fatalf("retry after the rollback: %+v, %d tickets", r, b.count())
			}
		})
	}
}
