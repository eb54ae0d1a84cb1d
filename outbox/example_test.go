package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/outbox"
	"github.com/idemgate/idemgate/store/sqlite"
)

// ExampleEnqueue is a service that keeps its orders beside the ledger, on
// one SQLite file: the order and the e-mail it must send are written in
// one transaction (the store bound to it with Tx), so that both commit or
// neither does; a relay then delivers the e-mail, with its derived key
// (scoped by tenant, as every key idemgate sends upstream).
func ExampleEnqueue() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "shop.db")
	store, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	// The service's own handle on the same file: its transactions write
	// from their start (_txlock=immediate), as Tx asks.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)`); err != nil {
		panic(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	if _, err := tx.Exec(`INSERT INTO orders VALUES ('order-7', 4200)`); err != nil {
		panic(err)
	}
	_, err = outbox.Enqueue(ctx, store.Tx(tx), outbox.Effect{Tenant: "shop", OperationKey: "order-7",
		Name: "confirmation-email", Target: "mailer", Path: "/v1/messages", Body: []byte(`{"to":"ada@example.com"}`)})
	if err != nil {
		_ = tx.Rollback()
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}

	// The mailer, which deduplicates by the key it is given.
	mailer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("mailer got", r.Method, r.URL.Path, "with key", r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusAccepted)
	}))
	defer mailer.Close()
	relay := &outbox.Relay{Store: store, Targets: map[string]outbox.Target{"mailer": {URL: mailer.URL}}}
	round, err := relay.Once(ctx)
	if err != nil {
		panic(err)
	}
	es, err := store.Effects(ctx, ledger.OpKey{Tenant: "shop", Namespace: ledger.NamespaceClients, Key: "order-7"})
	if err != nil {
		panic(err)
	}
	fmt.Println("delivered", round.Succeeded, "effect:", es[0].Name, es[0].State)
	// Output:
	// mailer got POST /v1/messages with key shop:order-7/confirmation-email
	// delivered 1 effect: confirmation-email succeeded
}
