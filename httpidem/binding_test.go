package httpidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
)

// TestPathParametersAreFingerprinted: in a Go service the middleware runs
// before the service's own mux has matched, so it reads the path
// parameters itself; a key reused for another intent is refused.
func TestPathParametersAreFingerprinted(t *testing.T) {
	t.Parallel()
	s := dbtest.SQLite(t)
	m, err := httpidem.New(httpidem.Options{Store: s, Tenant: func(*http.Request) (string, error) { return "acme", nil },
		Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/intents/{id}/capture"},
			{Method: "POST", Pattern: "/v1/files/{path...}"}}})
	if err != nil {
		t.Fatal(err)
	}
	var captures atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/intents/{id}/capture", func(w http.ResponseWriter, r *http.Request) {
		captures.Add(1)
		w.WriteHeader(201)
		io.WriteString(w, r.PathValue("id"))
	})
	mux.HandleFunc("POST /v1/files/{path...}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	srv := httptest.NewServer(m.Handler(mux))
	t.Cleanup(srv.Close)
	post := func(path, key string) int {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := post("/v1/intents/1/capture", "k"), post("/v1/intents/2/capture", "k"); a != 201 || b != 422 {
		t.Fatalf("intent 1 then 2 under one key: %d %d", a, b)
	}
	if captures.Load() != 1 {
		t.Fatalf("%d captures", captures.Load())
	}
	if a, b := post("/v1/files/a%2Fb", "f"), post("/v1/files/a/b", "f"); a != 201 || b != 422 {
		t.Fatalf("a%%2Fb then a/b under one key: %d %d", a, b)
	}
}
