package maintain_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/maintain"
	"github.com/idemgate/idemgate/store/sqlite"
)

// ExampleRun is a Go service that puts httpidem in front of its own
// handler, on an SQLite ledger, and runs the maintenance plane beside its
// server: lapsed leases become unknown, expired approvals free their
// operations, and keys past their retention are forgotten. Here a key is
// kept a millisecond (a day, by default), so the purge is seen at once.
func ExampleRun() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "maintain-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}

	// The service: its write route under the idempotency contract.
	idem, err := httpidem.New(httpidem.Options{Store: store, Retention: time.Millisecond,
		Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/tickets"}},
		Tenant: func(*http.Request) (string, error) { return "acme", nil }})
	if err != nil {
		panic(err)
	}
	tickets := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"T-1"}`)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: idem.Handler(tickets)}
	go srv.Serve(ln)

	// Beside it, the maintenance plane, until the service stops.
	purged := make(chan int, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		maintain.Run(ctx, store, maintain.Options{PurgeInterval: 10 * time.Millisecond,
			OnPurged: func(n int) { purged <- n }})
	}()

	req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/tickets",
		strings.NewReader(`{"title":"Disk full"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "ticket-disk-full")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)
	fmt.Println("purged", <-purged, "operation past its retention")

	// Stopping: the server first, then the plane (Run returns once its
	// jobs have stopped), then the store.
	_ = srv.Shutdown(ctx)
	cancel()
	<-stopped
	// Output:
	// 201 Created
	// purged 1 operation past its retention
}
