package outbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/outbox"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/sqlite"
)

// The crash drills run a shop in a child process: each order is a row of
// its own table and an effect (notify the warehouse) enqueued in the same
// transaction. The child is SIGKILLed between the two writes, after both
// before the commit, and at random moments under load; each order must
// then have its effect and each effect its order.

func TestMain(m *testing.M) {
	if os.Getenv("IDEMGATE_OUTBOX_SHOP") != "" {
		os.Exit(runShop())
	}
	os.Exit(m.Run())
}

// shop is a Go service's business transaction, on either store.
type shop struct {
	begin func(ctx context.Context) (shopTx, error)
	close func()
}

type shopTx struct {
	ledger   ledger.Steps
	order    func(ctx context.Context, id int) error
	commit   func(ctx context.Context) error
	rollback func(ctx context.Context)
}

// openShop opens the store and the shop's own handle on its database.
func openShop(ctx context.Context, dsn string) (*shop, error) {
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		return sqliteShop(ctx, path)
	}
	return postgresShop(ctx, dsn)
}

func sqliteShop(ctx context.Context, path string) (*shop, error) {
	s, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	return &shop{close: func() { db.Close(); s.Close() }, begin: func(ctx context.Context) (shopTx, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return shopTx{}, err
		}
		return shopTx{ledger: s.Tx(tx),
			order: func(ctx context.Context, id int) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id)
				return err
			},
			commit:   func(context.Context) error { return tx.Commit() },
			rollback: func(context.Context) { _ = tx.Rollback() }}, nil
	}}, nil
}

func postgresShop(ctx context.Context, dsn string) (*shop, error) {
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return &shop{close: func() { pool.Close(); s.Close() }, begin: func(ctx context.Context) (shopTx, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return shopTx{}, err
		}
		return shopTx{ledger: s.Tx(tx),
			order: func(ctx context.Context, id int) error {
				_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, id)
				return err
			},
			commit:   func(ctx context.Context) error { return tx.Commit(ctx) },
			rollback: func(ctx context.Context) { _ = tx.Rollback(ctx) }}, nil
	}}, nil
}

// runShop is the child: orders from IDEMGATE_OUTBOX_FROM on, each its row
// and its effect in one transaction. At the order IDEMGATE_OUTBOX_STOP
// names ("between:N" or "enqueued:N") it says so on stdout and waits, in
// the middle of that transaction, to be killed.
func runShop() int {
	ctx := context.Background()
	sh, err := openShop(ctx, os.Getenv("IDEMGATE_OUTBOX_SHOP"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer sh.close()
	from, _ := strconv.Atoi(os.Getenv("IDEMGATE_OUTBOX_FROM"))
	where, at, _ := strings.Cut(os.Getenv("IDEMGATE_OUTBOX_STOP"), ":")
	stop, _ := strconv.Atoi(at)
	for id := from; ; id++ {
		tx, err := sh.begin(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := tx.order(ctx, id); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		pause(id == stop && where == "between", "between", id)
		if _, err := outbox.Enqueue(ctx, tx.ledger, warehouse(id)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		pause(id == stop && where == "enqueued", "enqueued", id)
		if err := tx.commit(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Printf("committed %d\n", id)
	}
}

// pause says where the child stands and waits to be killed.
func pause(now bool, where string, id int) {
	if now {
		fmt.Printf("%s %d\n", where, id)
		time.Sleep(time.Hour)
	}
}

func warehouse(id int) outbox.Effect {
	return outbox.Effect{Tenant: "shop", OperationKey: fmt.Sprintf("order-%d", id), Name: "notify-warehouse",
		Target: "warehouse", Path: "/v1/shipments", Body: []byte(fmt.Sprintf(`{"order":%d}`, id))}
}

// child starts the shop from order from, stopping as stop says, and
// returns it with the lines it prints.
func child(t *testing.T, dsn string, from int, stop string) (*exec.Cmd, <-chan string) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "IDEMGATE_OUTBOX_SHOP="+dsn, "IDEMGATE_OUTBOX_FROM="+strconv.Itoa(from),
		"IDEMGATE_OUTBOX_STOP="+stop)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // the storm prints more than anyone reads
			}
		}
		close(lines)
	}()
	return cmd, lines
}

// killAt kills the child once it prints want.
func killAt(t *testing.T, cmd *exec.Cmd, lines <-chan string, want string) {
	timeout := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the shop exited before %q", want)
			}
			if l == want {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
				return
			}
		case <-timeout:
			t.Fatalf("the shop never said %q", want)
		}
	}
}

// TestOutboxKill9: a business write and its effect commit together or not
// at all. SIGKILL between the two writes, after both before the commit,
// and at random moments of a storm of orders: every order has exactly its
// effect, and every effect its order.
func TestOutboxKill9(t *testing.T) {
	t.Parallel()
	for name, prepare := range map[string]func(t *testing.T) (string, func() []int){
		"sqlite": sqliteOrders, "postgres": postgresOrders,
	} {
		t.Run(name, func(t *testing.T) {
			dsn, orders := prepare(t)
			cmd, lines := child(t, dsn, 1, "between:5")
			killAt(t, cmd, lines, "between 5")
			checkOrders(t, dsn, orders(), 4)
			cmd, lines = child(t, dsn, 5, "enqueued:8")
			killAt(t, cmd, lines, "enqueued 8")
			checkOrders(t, dsn, orders(), 7)
			for range 5 {
				got := orders()
				cmd, lines = child(t, dsn, got[len(got)-1]+1, "")
				killAt(t, cmd, lines, fmt.Sprintf("committed %d", got[len(got)-1]+3))
				time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond) // somewhere in a later order
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
			}
			got := orders()
			checkOrders(t, dsn, got, len(got))
		})
	}
}

// checkOrders checks that the orders are 1..n, and that order-i has its
// one effect for each of them, and none past them.
func checkOrders(t *testing.T, dsn string, orders []int, n int) {
	t.Helper()
	if len(orders) != n || (n > 0 && orders[n-1] != n) {
		t.Fatalf("orders %v, want 1..%d", orders, n)
	}
	ctx := context.Background()
	s, err := openStoreAt(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id := 1; id <= n+1; id++ {
		es, err := s.Effects(ctx, ledger.OpKey{Tenant: "shop", Namespace: ledger.NamespaceClients,
			Key: fmt.Sprintf("order-%d", id)})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1, false: 0}[id <= n]; len(es) != want {
			t.Fatalf("order %d: %d effects, want %d (orders 1..%d committed)", id, len(es), want, n)
		}
	}
}

func openStoreAt(ctx context.Context, dsn string) (ledger.Store, error) {
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		return sqlite.Open(ctx, path, sqlite.Options{})
	}
	return postgres.Open(ctx, dsn, postgres.Options{})
}

// sqliteOrders makes a store file with the shop's table beside the
// ledger's, and returns its DSN and a reader of the committed orders.
func sqliteOrders(t *testing.T) (string, func() []int) {
	path := filepath.Join(t.TempDir(), "shop.db")
	dbtest.SQLiteAt(t, path)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE orders (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return "sqlite:" + path, func() []int {
		rows, err := db.Query(`SELECT id FROM orders ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for rows.Next() {
			var id int
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// postgresOrders is sqliteOrders on a schema of the test's own.
func postgresOrders(t *testing.T) (string, func() []int) {
	dsn := dbtest.PostgresDSN(t)
	dbtest.PostgresAt(t, dsn)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), `CREATE TABLE orders (id integer PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return dsn, func() []int {
		rows, err := pool.Query(context.Background(), `SELECT id FROM orders ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}
