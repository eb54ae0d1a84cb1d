package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/sqlite"
)

// BenchmarkMCPProxy measures a guarded tools/call through the proxy
// beside the same call made straight to the upstream (mcpcounter over
// Streamable HTTP, which appends and syncs each effect), at 1 and 16
// concurrent sessions, on both stores; a replay beside the upstream call;
// the floor the target is stated in, one ledger commit (a reservation);
// and the floor a guarded call cannot go under, the two durable commits
// the design asks of it (its reservation before it is sent, its outcome
// before it is answered); and the last two again under
// durability=relaxed. Read ns/op side by side, from one run:
//
//	go test -run '^$' -bench BenchmarkMCPProxy -benchtime 300x -count 3 ./cmd/internal/server
func BenchmarkMCPProxy(b *testing.B) {
	dbtest.Each(b, func(b *testing.B, db dbtest.DB) {
		store := db.Open(b)
		upstream := startHTTPCounter(b, filepath.Join(b.TempDir(), "effects.jsonl"), "")
		proxyURL := benchProxy(b, store, db.DSN, upstream)
		for _, c := range []int{1, 16} {
			b.Run(fmt.Sprintf("direct/c=%d", c), func(b *testing.B) { benchCalls(b, "http://"+upstream+"/mcp", c, false) })
			b.Run(fmt.Sprintf("proxy/c=%d", c), func(b *testing.B) { benchCalls(b, proxyURL, c, true) })
		}
		b.Run("replay/c=1", func(b *testing.B) { benchReplays(b, proxyURL) })
		b.Run("commit/c=1", func(b *testing.B) { benchCommit(b, store, false) })
		b.Run("commits/c=1", func(b *testing.B) { benchCommit(b, store, true) })
		// The same with durability=relaxed, the store's opt-in: a
		// completion acknowledged before it reaches the disk.
		relaxed := db.Open(b, dbtest.Options{SQLite: sqlite.Options{Relaxed: true}, Postgres: postgres.Options{Relaxed: true}})
		relaxedURL := benchProxy(b, relaxed, db.DSN, upstream)
		b.Run("proxy-relaxed/c=1", func(b *testing.B) { benchCalls(b, relaxedURL, 1, true) })
		b.Run("commits-relaxed/c=1", func(b *testing.B) { benchCommit(b, relaxed, true) })
	})
}

// benchProxy serves a gateway proxying the upstream as "bench".
func benchProxy(b *testing.B, store ledger.Store, dsn, upstream string) string {
	text := fmt.Sprintf("store: %s\nprincipals:\n  - {name: agent, tenant: acme, roles: [agent], token_sha256: %s}\n"+
		"limits: {default: {rate: 1000000/s, burst: 1000000}}\n"+
		"mcp_servers:\n  - {name: bench, url: 'http://%s/mcp', timeout: 10s}\n", dsn, sha("agent-token"), upstream)
	path := filepath.Join(b.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	g, err := server.New(cfg, store, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	b.Cleanup(func() { srv.Close(); g.Close() })
	return srv.URL + "/mcp/bench"
}

// benchSession opens an MCP session at url.
func benchSession(b *testing.B, url string) *mcp.ClientSession {
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: withToken{"agent-token"}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

var benchIntent atomic.Int64

// benchCalls makes b.N create_ticket calls over c sessions, each a new
// action (a new intent through the proxy).
func benchCalls(b *testing.B, url string, c int, guarded bool) {
	sessions := make(chan *mcp.ClientSession, c)
	for range c {
		sessions <- benchSession(b, url)
	}
	b.SetParallelism((c + 1) / 2) // GOMAXPROCS is 2 here: 1 → 2 goroutines; keep c=1 sequential below
	lat := &latencies{}
	defer lat.report(b)
	call := func(s *mcp.ClientSession) {
		args := map[string]any{"title": "bench"}
		if guarded {
			args["intent"] = "i-" + strconv.FormatInt(benchIntent.Add(1), 10)
		}
		t0 := time.Now()
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket", Arguments: args})
		if err != nil || res.IsError {
			b.Fatalf("call: %v %+v", err, res)
		}
		lat.add(time.Since(t0))
	}
	b.ResetTimer()
	if c == 1 {
		s := <-sessions
		for range b.N {
			call(s)
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		s := <-sessions
		defer func() { sessions <- s }()
		for pb.Next() {
			call(s)
		}
	})
}

// latencies are a benchmark's calls' latencies, reported as its p50 and
// p99 (cmd/bench's suite reads them beside ns/op, a mean).
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B) {
	if len(l.all) == 0 {
		return
	}
	slices.Sort(l.all)
	at := func(q float64) float64 { return float64(l.all[int(float64(len(l.all)-1)*q)]) / 1e6 }
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

// benchReplays calls one intent again and again: each a replay.
func benchReplays(b *testing.B, url string) {
	s := benchSession(b, url)
	args := map[string]any{"title": "bench", "intent": "replayed"}
	if _, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket", Arguments: args}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket", Arguments: args})
		if err != nil || res.Meta["io.idemgate/replayed"] != true {
			b.Fatalf("replay: %v %+v", err, res)
		}
	}
}

// benchCommit is one ledger commit, a reservation, or with complete the
// two a guarded call makes: the reservation, then its outcome recorded.
func benchCommit(b *testing.B, store ledger.Store, complete bool) {
	prefix := ledger.NewID() + "-" // each run its own keys: b.N restarts at 0
	for i := range b.N {
		res, err := store.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
			Tenant: "floor", Key: prefix + strconv.Itoa(i),
			Route: "POST /floor", Fingerprint: "sha256:00", Lease: 30e9, Retention: 3600e9, ID: ledger.NewID(), Token: ledger.NewToken(),
			Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if complete {
			_, err = store.Complete(context.Background(), *res.Lease, ledger.Outcome{State: ledger.Succeeded,
				Response: &ledger.Response{Status: 200, Body: []byte(`{"result":{"content":[]}}`)}})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}
