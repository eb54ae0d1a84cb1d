package httpidem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/store/sqlite"
)

// ExampleNew puts the contract in front of a Go service's own write
// handler, on an embedded SQLite ledger: a client that retries with the
// same Idempotency-Key gets the stored answer, marked as a replay, and
// the handler runs once; the same key with another body is refused.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "httpidem-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(context.Background(), filepath.Join(dir, "ledger.db"), sqlite.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	if err := store.Migrate(context.Background()); err != nil {
		panic(err)
	}

	idem, err := httpidem.New(httpidem.Options{Store: store,
		Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/tickets", ResultRef: "body:/id"}},
		// Keys are scoped by tenant: here, the one the caller's token names.
		Tenant: func(r *http.Request) (string, error) { return "acme", nil }})
	if err != nil {
		panic(err)
	}
	var created atomic.Int64 // the effects: tickets made
	tickets := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := created.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"T-%d"}`, n)
	})
	srv := httptest.NewServer(idem.Handler(tickets))
	defer srv.Close()

	post := func(body string) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/tickets", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "task-42/create-ticket")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if p, ok := contract.ReadProblem(resp.Header, b); ok {
			fmt.Println(resp.StatusCode, p.Code)
			return
		}
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(b)), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	post(`{"title":"Disk full"}`)
	post(`{"title":"Disk full"}`) // a retry: the stored answer
	post(`{"title":"Disk ok"}`)   // the key reused for another request
	fmt.Println("tickets made:", created.Load())
	// Output:
	// 201 {"id":"T-1"} replayed: false
	// 201 {"id":"T-1"} replayed: true
	// 422 fingerprint_mismatch
	// tickets made: 1
}
