package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// upstream is a counting test API. Effects are counted by what it did, not
// by what anyone was told.
type upstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	effects map[string]int    // by path
	byKey   map[string]string // honours-key dedup: key -> ticket
	seen    []http.Header
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{effects: map[string]int{}, byKey: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tickets", func(w http.ResponseWriter, r *http.Request) {
		n := u.effect(r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"id":"T-%d"}`, n)
	})
	mux.HandleFunc("POST /v1/refs", func(w http.ResponseWriter, r *http.Request) {
		n := u.effect(r) // names its effect in the body, for result_ref
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"id":"R-%d"}`, n)
	})
	mux.HandleFunc("POST /v1/dropped/probed", func(w http.ResponseWriter, r *http.Request) {
		// Read, not applied, and the connection dropped: nobody can tell.
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	})
	mux.HandleFunc("GET /v1/effects", func(w http.ResponseWriter, r *http.Request) {
		// What a probe reads: the effects made on a path, and whom it sees.
		u.mu.Lock()
		n := u.effects[r.URL.Query().Get("path")]
		u.seen = append(u.seen, r.Header.Clone())
		u.mu.Unlock()
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(503)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"count":%d,"id":"E-%d"}`, n, n)
	})
	lost := func(w http.ResponseWriter, r *http.Request) {
		u.effect(r) // applied, then the answer is lost
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	}
	for _, path := range []string{"/v1/lost", "/v1/lost/probed", "/v1/failing/probed"} {
		mux.HandleFunc("POST "+path, lost)
	}
	mux.HandleFunc("POST /v1/cut", func(w http.ResponseWriter, r *http.Request) {
		u.effect(r) // applied; the answer is cut after its first bytes
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":`))
		http.NewResponseController(w).Flush()
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	})
	mux.HandleFunc("POST /v1/slow", func(w http.ResponseWriter, r *http.Request) {
		u.effect(r)
		time.Sleep(400 * time.Millisecond)
		w.WriteHeader(201)
	})
	mux.HandleFunc("POST /v1/honours", func(w http.ResponseWriter, r *http.Request) {
		// This upstream deduplicates by Idempotency-Key itself; its first
		// answer is lost on the way back.
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		ticket, dup := u.byKey[key]
		if !dup {
			u.effects[r.URL.Path]++
			ticket = fmt.Sprintf("H-%d", u.effects[r.URL.Path])
			u.byKey[key] = ticket
		}
		u.mu.Unlock()
		if !dup {
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
			return
		}
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"id":%q}`, ticket)
	})
	mux.HandleFunc("POST /v1/policy/{name}", func(w http.ResponseWriter, r *http.Request) {
		n := u.effect(r)
		status := 201
		if s := r.Header.Get("X-Status"); s != "" {
			fmt.Sscan(s, &status)
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"%s":%d}`, r.PathValue("name"), n)
	})
	mux.HandleFunc("GET /v1/tickets/{id}", func(w http.ResponseWriter, r *http.Request) {
		u.effect(r)
		fmt.Fprintf(w, `{"id":%q}`, r.PathValue("id"))
	})
	u.srv = httptest.NewServer(mux)
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) effect(r *http.Request) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.effects[r.URL.Path]++
	u.seen = append(u.seen, r.Header.Clone())
	return u.effects[r.URL.Path]
}

func (u *upstream) count(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.effects[path]
}

func (u *upstream) lastHeaders() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[len(u.seen)-1]
}

func sha(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// deadAddress is a local port where nothing listens.
func deadAddress(t testing.TB) string {
	// Port 1 (tcpmux) is never served here: connections are refused. A
	// port picked free and closed could be taken by another test's server
	// meanwhile, which then answers for the "down" upstream.
	t.Helper()
	return "127.0.0.1:1"
}

type env struct {
	t     testing.TB
	up    *upstream
	store ledger.Store
	gw    *httptest.Server
	g     *server.Server
	logs  *logBuffer // the gateway's log lines
}

// logBuffer collects log lines from concurrent requests.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// forEachStore runs test on a gateway on a new store of each kind.
func forEachStore(t *testing.T, test func(t *testing.T, e *env)) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		test(t, newEnv(t, db.Open(t), db.DSN, ""))
	})
}

// configTemplate is the test gateway's configuration. Only the timeout
// tests' route (/v1/slow, upstream slow) has a short upstream timeout:
// every other test's upstream is patient, so a loaded machine slows it
// down without turning its answer into a 504.
const configTemplate = `store: %[1]s
sweep_interval: 50ms
purge_interval: 100ms
upstreams:
  ops:
    url: %[2]s
    timeout: 30s
    headers: {Authorization: "Bearer upstream-secret"}
    forward_key: true
  slow:
    url: %[2]s
    timeout: 300ms
    forward_key: true
  dedup:
    url: %[3]s
    honours_key: true
    forward_key: true
  down:
    url: http://%[4]s
  bare:
    url: %[5]s
principals:
  - {name: agent, tenant: acme, roles: [agent], token_sha256: %[6]s}
  - {name: alice, tenant: acme, roles: [admin], token_sha256: %[7]s}
  - {name: other, tenant: globex, roles: [agent], token_sha256: %[8]s}
  - {name: scraper, tenant: acme, roles: [metrics], token_sha256: %[9]s}
routes:
  - {match: POST /v1/tickets, upstream: ops, fingerprint: {ignore: [/client_time]}}
  - {match: POST /v1/lost, upstream: ops}
  - {match: POST /v1/cut, upstream: ops}
  - {match: POST /v1/slow, upstream: slow}
  - {match: POST /v1/honours, upstream: dedup}
  - {match: POST /v1/down, upstream: down}
  - {match: "GET /v1/tickets/{id}", upstream: ops}
  - {match: "GET /v1/down/{id}", upstream: down}
  - {match: POST /v1/admin-only, upstream: ops, roles: [admin]}
  - {match: POST /v1/policy/alerts, upstream: ops, business_key: /source_event_id}
  - {match: POST /v1/policy/deploys, upstream: ops, concurrency_key: /environment}
  - {match: POST /v1/policy/hooks, upstream: ops, key_from: "header:X-Delivery-Id"}
  - {match: POST /v1/policy/final, upstream: ops, outcomes: {final: [409], not_applied: [500]}}
  - {match: POST /v1/policy/bare, upstream: bare}
%[10]s`

func newEnv(t *testing.T, store ledger.Store, dsn, extraRoutes string) *env {
	return newEnvWith(t, store, dsn, extraRoutes, nil)
}

// newEnvWith is newEnv whose upstream "bare" is served by bare, if given:
// an upstream a test needs to behave as the counting one does not.
func newEnvWith(t testing.TB, store ledger.Store, dsn, extraRoutes string, bare http.Handler, opts ...server.Option) *env {
	return newEnvEdited(t, store, dsn, extraRoutes, bare, func(s string) string { return s }, opts...)
}

// newEnvEdited is newEnvWith on the configuration edit makes of its text.
func newEnvEdited(t testing.TB, store ledger.Store, dsn, extraRoutes string, bare http.Handler, edit func(string) string,
	opts ...server.Option) *env {
	up := newUpstream(t)
	bareURL := up.srv.URL
	if bare != nil {
		srv := httptest.NewServer(bare)
		t.Cleanup(srv.Close)
		bareURL = srv.URL
	}
	text := fmt.Sprintf(configTemplate, dsn, up.srv.URL, up.srv.URL, deadAddress(t), bareURL,
		sha("agent-token"), sha("alice-token"), sha("globex-token"), sha("scraper-token"), extraRoutes)
	cfg := loadConfig(t, t.TempDir(), edit(text))
	logs := &logBuffer{}
	g, err := server.New(cfg, store, slog.New(slog.NewJSONHandler(logs, nil)), opts...)
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g.Handler())
	t.Cleanup(gw.Close)
	return &env{t: t, up: up, store: store, gw: gw, g: g, logs: logs}
}

// loadConfig writes text to dir/gw.yaml and loads it.
func loadConfig(t testing.TB, dir, text string) *config.Config {
	t.Helper()
	path := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

type reply struct {
	status int
	header http.Header
	body   string
}

// do sends a request as the holder of token, with headers in pairs.
func (e *env) do(method, path, token, body string, headers ...string) reply {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.gw.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return roundTrip(e.t, req)
}

// roundTrip sends req and reads its whole answer.
func roundTrip(t testing.TB, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func code(r reply) string {
	var p contract.Problem
	_ = json.Unmarshal([]byte(r.body), &p)
	return p.Code
}

func (e *env) operations() []*ledger.Operation {
	page, err := e.store.List(context.Background(), ledger.ListParams{})
	if err != nil {
		e.t.Fatal(err)
	}
	return page.Operations
}

func TestAuthenticationAndDenyByDefault(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		checks := []struct {
			name, method, path, token string
			status                    int
			code                      string
		}{
			{"no token", "POST", "/v1/tickets", "", 401, "unauthorized"},
			{"unknown token", "POST", "/v1/tickets", "guess", 401, "unauthorized"},
			{"unconfigured path", "POST", "/v1/other", "agent-token", 404, "not_found"},
			{"unconfigured method", "DELETE", "/v1/tickets", "agent-token", 404, "not_found"},
			{"missing role", "POST", "/v1/admin-only", "agent-token", 403, "forbidden"},
			{"control API without token", "GET", "/_idem/v1/operations", "", 401, "unauthorized"},
		}
		for _, c := range checks {
			r := e.do(c.method, c.path, c.token, `{}`, "Idempotency-Key", "k1")
			if r.status != c.status || code(r) != c.code {
				t.Errorf("%s: %d %s", c.name, r.status, r.body)
			}
		}
		if len(e.operations()) != 0 || e.up.count("/v1/tickets")+e.up.count("/v1/admin-only") != 0 {
			t.Fatal("a refused request reached the store or the upstream")
		}
		// A read route is proxied, never recorded; the agent's credentials
		// stay at the gateway and the upstream's are added.
		r := e.do("GET", "/v1/tickets/T-9", "agent-token", "")
		if r.status != 200 || r.body != `{"id":"T-9"}` || len(e.operations()) != 0 {
			t.Fatalf("read route: %+v", r)
		}
		if got := e.up.lastHeaders().Get("Authorization"); got != "Bearer upstream-secret" {
			t.Fatalf("upstream saw Authorization %q", got)
		}
	})
}

func TestWritesAreForwardedOnceAndReplayed(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		first := e.do("POST", "/v1/tickets", "agent-token", `{"title":"Disk full","client_time":"1"}`,
			"Idempotency-Key", "task-42/create-ticket")
		again := e.do("POST", "/v1/tickets", "agent-token", `{"client_time":"2","title":"Disk full"}`,
			"Idempotency-Key", "task-42/create-ticket")
		if first.status != 201 || again.status != 201 || again.body != first.body ||
			again.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotency-Operation") == "" {
			t.Fatalf("first %+v again %+v", first, again)
		}
		h := e.up.lastHeaders()
		if h.Get("Authorization") != "Bearer upstream-secret" || h.Get("Idempotency-Key") != "acme:task-42/create-ticket" {
			t.Fatalf("upstream saw %v", h)
		}
		if e.up.count("/v1/tickets") != 1 {
			t.Fatalf("%d effects", e.up.count("/v1/tickets"))
		}
		// The same key in another tenant is another operation.
		other := e.do("POST", "/v1/tickets", "globex-token", `{"title":"Disk full"}`, "Idempotency-Key", "task-42/create-ticket")
		if other.status != 201 || other.body == first.body || e.up.count("/v1/tickets") != 2 {
			t.Fatalf("globex: %+v", other)
		}
		changed := e.do("POST", "/v1/tickets", "agent-token", `{"title":"Disk on fire"}`, "Idempotency-Key", "task-42/create-ticket")
		if changed.status != 422 || code(changed) != "fingerprint_mismatch" || strings.Contains(changed.body, "Disk full") ||
			e.up.count("/v1/tickets") != 2 {
			t.Fatalf("changed payload: %+v", changed)
		}
	})
}

func TestLostResponseIsUnknownAndNeverResent(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		r := e.do("POST", "/v1/lost", "agent-token", `{"amount_minor":1999}`, "Idempotency-Key", "pay-1")
		if r.status != 502 || code(r) != "outcome_unknown" {
			t.Fatalf("lost answer: %+v", r)
		}
		retry := e.do("POST", "/v1/lost", "agent-token", `{"amount_minor":1999}`, "Idempotency-Key", "pay-1")
		if retry.status != 409 || code(retry) != "outcome_unknown" {
			t.Fatalf("retry: %+v", retry)
		}
		op, _ := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "pay-1"})
		if op.State != ledger.Unknown || op.LastError != "upstream_reset" || e.up.count("/v1/lost") != 1 {
			t.Fatalf("operation %s (%s), %d effects", op.State, op.LastError, e.up.count("/v1/lost"))
		}
	})
}

func TestTimeoutAfterSendingIsUnknown(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		r := e.do("POST", "/v1/slow", "agent-token", `{}`, "Idempotency-Key", "slow-1")
		op, _ := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "slow-1"})
		if r.status != 504 || code(r) != "outcome_unknown" || op.State != ledger.Unknown || op.LastError != "upstream_timeout" {
			t.Fatalf("timeout: %+v, operation %s %s", r, op.State, op.LastError)
		}
	})
}

func TestNothingSentIsReleased(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		for i := 1; i <= 2; i++ {
			r := e.do("POST", "/v1/down", "agent-token", `{}`, "Idempotency-Key", "down-1")
			if r.status != 502 || code(r) != "upstream_unavailable" || r.header.Get("Retry-After") == "" {
				t.Fatalf("attempt %d: %+v", i, r)
			}
		}
		op, _ := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "down-1"})
		if op.State != ledger.Prepared || op.Attempts != 2 || op.LastError != "upstream_unreachable" {
			t.Fatalf("after two dial errors: %s, %d attempts, %s", op.State, op.Attempts, op.LastError)
		}
	})
}

func TestUnknownIsResentWhereTheUpstreamHonoursTheKey(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		first := e.do("POST", "/v1/honours", "agent-token", `{}`, "Idempotency-Key", "dedup-1")
		if first.status != 502 || code(first) != "outcome_unknown" {
			t.Fatalf("first: %+v", first)
		}
		retry := e.do("POST", "/v1/honours", "agent-token", `{}`, "Idempotency-Key", "dedup-1")
		op, _ := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "dedup-1"})
		if retry.status != 201 || retry.body != `{"id":"H-1"}` || op.State != ledger.Succeeded || op.Attempts != 2 {
			t.Fatalf("re-sent: %+v, operation %s after %d attempts", retry, op.State, op.Attempts)
		}
		if e.up.count("/v1/honours") != 1 {
			t.Fatalf("%d effects", e.up.count("/v1/honours"))
		}
		// The same key from another tenant is another action at the
		// upstream too: never answered with acme's ticket.
		other := e.do("POST", "/v1/honours", "globex-token", `{}`, "Idempotency-Key", "dedup-1")
		if code(other) != "outcome_unknown" || e.up.count("/v1/honours") != 2 {
			t.Fatalf("globex, same key: %+v, %d effects", other, e.up.count("/v1/honours"))
		}
	})
}

func TestUpstreamKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 255)
	for _, c := range []struct{ tenant, key, want string }{
		{"acme", "task-42", "acme:task-42"},
		{"globex", "task-42", "globex:task-42"},
		{"acme", long, "sha256:"},
	} {
		got := ledger.UpstreamKey(c.tenant, ledger.NamespaceClients, c.key)
		if !strings.HasPrefix(got, c.want) || len(got) > 255 {
			t.Errorf("UpstreamKey(%q, %d chars) = %q", c.tenant, len(c.key), got)
		}
	}
	if ledger.UpstreamKey("acme", ledger.NamespaceClients, long) == ledger.UpstreamKey("globex", ledger.NamespaceClients, long) {
		t.Error("a long key must stay tenant-scoped")
	}
}

func TestControlAPI(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		e.do("POST", "/v1/lost", "agent-token", `{}`, "Idempotency-Key", "lost-1")
		e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "ok-1")
		lost, _ := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "lost-1"})

		r := e.do("GET", "/_idem/v1/operations/"+lost.ID, "agent-token", "")
		var v contract.View
		if err := json.Unmarshal([]byte(r.body), &v); err != nil || r.status != 200 || v.State != ledger.Unknown ||
			len(v.History) != 2 || strings.Contains(r.body, "amount") {
			t.Fatalf("get: %d %s", r.status, r.body)
		}
		if r := e.do("GET", "/_idem/v1/operations/"+lost.ID, "globex-token", ""); r.status != 404 {
			t.Fatalf("another tenant's operation: %d %s", r.status, r.body)
		}
		if r := e.do("GET", "/_idem/v1/operations?key=lost-1", "globex-token", ""); r.status != 404 {
			t.Fatalf("another tenant's key: %d", r.status)
		}
		r = e.do("GET", "/_idem/v1/operations?state=unknown", "agent-token", "")
		var lv contract.ListView
		if json.Unmarshal([]byte(r.body), &lv); len(lv.Operations) != 1 || lv.Operations[0].ID != lost.ID {
			t.Fatalf("list unknown: %s", r.body)
		}
		resolve := `{"state":"succeeded","note":"payment found in the PSP dashboard"}`
		if r := e.do("POST", "/_idem/v1/operations/"+lost.ID+"/resolve", "agent-token", resolve); r.status != 403 {
			t.Fatalf("resolve by an agent: %d", r.status)
		}
		r = e.do("POST", "/_idem/v1/operations/"+lost.ID+"/resolve", "alice-token", resolve)
		if json.Unmarshal([]byte(r.body), &v); r.status != 200 || v.State != ledger.Succeeded {
			t.Fatalf("resolve: %d %s", r.status, r.body)
		}
		last := v.History[len(v.History)-1]
		if last.Actor != "alice" || last.Reason != "payment found in the PSP dashboard" || *last.From != ledger.Unknown {
			t.Fatalf("resolution not audited: %+v", last)
		}
		r = e.do("POST", "/_idem/v1/operations/"+lost.ID+"/resolve", "alice-token", resolve)
		var p contract.Problem
		if json.Unmarshal([]byte(r.body), &p); r.status != 409 || p.Code != contract.CodeIllegalTransition ||
			p.Title != "Not allowed in the operation's state" || p.OperationID != lost.ID || p.State != ledger.Succeeded ||
			p.StatusURL != "/_idem/v1/operations/"+lost.ID {
			t.Fatalf("resolving twice: %d %s", r.status, r.body)
		}
		// The retry now gets the resolution, not "unknown".
		if r := e.do("POST", "/v1/lost", "agent-token", `{}`, "Idempotency-Key", "lost-1"); r.status != 200 ||
			r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after resolution: %+v", r)
		}
	})
}

func TestSchemaPolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	schema := `{"type":"object","properties":{"title":{"type":"string"},"priority":{"type":"integer","default":3}},
		"required":["title"]}`
	path := filepath.Join(dir, "ticket.json")
	if err := os.WriteFile(path, []byte(schema), 0o600); err != nil {
		t.Fatal(err)
	}
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		store, dsn := db.Open(t), db.DSN
		e := newEnv(t, store, dsn, "  - {match: POST /v1/typed, upstream: ops, schema: "+path+"}\n")
		e.up.srv.Config.Handler.(*http.ServeMux).HandleFunc("POST /v1/typed", func(w http.ResponseWriter, r *http.Request) {
			n := e.up.effect(r)
			w.WriteHeader(201)
			fmt.Fprintf(w, "typed %d", n)
		})
		for _, bad := range []string{`{"title":"x","surprise":1}`, `{"priority":1}`, `{"title":5}`} {
			if r := e.do("POST", "/v1/typed", "agent-token", bad, "Idempotency-Key", "s-bad"); r.status != 422 ||
				code(r) != "invalid_command" {
				t.Fatalf("%s: %+v", bad, r)
			}
		}
		if len(e.operations()) != 0 {
			t.Fatal("an invalid command was reserved")
		}
		a := e.do("POST", "/v1/typed", "agent-token", `{"title":"x"}`, "Idempotency-Key", "s-1")
		b := e.do("POST", "/v1/typed", "agent-token", `{"title":"x","priority":3}`, "Idempotency-Key", "s-1")
		if a.status != 201 || b.status != 201 || b.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a default sent or omitted is one command: %+v %+v", a, b)
		}
	})
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		for _, path := range []string{"/healthz", "/readyz"} {
			if r := e.do("GET", path, "", ""); r.status != 200 {
				t.Fatalf("%s: %d %s", path, r.status, r.body)
			}
		}
		e.store.Close() // the store goes away: not ready, still alive
		if r := e.do("GET", "/readyz", "", ""); r.status != 503 || code(r) != "store_unavailable" {
			t.Fatalf("readyz without a store: %d %s", r.status, r.body)
		}
		if r := e.do("GET", "/healthz", "", ""); r.status != 200 {
			t.Fatalf("healthz: %d", r.status)
		}
	})
}

func TestRoutePoliciesThroughTheGateway(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		// business_key: one alert, whatever the key and the wording.
		a := e.do("POST", "/v1/policy/alerts", "agent-token", `{"source_event_id":"e1","title":"DB down"}`, "Idempotency-Key", "a1")
		b := e.do("POST", "/v1/policy/alerts", "agent-token", `{"source_event_id":"e1","title":"db is down"}`, "Idempotency-Key", "a2")
		if a.status != 201 || b.body != a.body || b.header.Get("Idempotency-Duplicate-Of") == "" || e.up.count("/v1/policy/alerts") != 1 {
			t.Fatalf("business key: %+v %+v", a, b)
		}
		// concurrency_key: a second live deployment to one environment.
		if _, err := e.store.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
			Tenant: "acme", Key: "running",
			Route: "POST /v1/policy/deploys", Fingerprint: "sha256:x", ConcurrencyKey: "production", Lease: time.Hour,
			Retention: time.Hour, Actor: "other-gateway"}); err != nil {
			t.Fatal(err)
		}
		r := e.do("POST", "/v1/policy/deploys", "agent-token", `{"environment":"production"}`, "Idempotency-Key", "d1")
		if r.status != 409 || code(r) != "concurrency_locked" || e.up.count("/v1/policy/deploys") != 0 {
			t.Fatalf("concurrency key: %+v", r)
		}
		if r := e.do("POST", "/v1/policy/deploys", "agent-token", `{}`, "Idempotency-Key", "d2"); r.status != 422 {
			t.Fatalf("no environment: %+v", r)
		}
		// key_from: a webhook delivered twice.
		for range 2 {
			e.do("POST", "/v1/policy/hooks", "agent-token", `{"event":"paid"}`, "X-Delivery-Id", "dlv-7")
		}
		if e.up.count("/v1/policy/hooks") != 1 {
			t.Fatalf("webhook delivered twice: %d effects", e.up.count("/v1/policy/hooks"))
		}
		// outcomes: this upstream's 409 is final, its 500 means not applied.
		f1 := e.do("POST", "/v1/policy/final", "agent-token", `{}`, "Idempotency-Key", "f1", "X-Status", "409")
		f2 := e.do("POST", "/v1/policy/final", "agent-token", `{}`, "Idempotency-Key", "f1", "X-Status", "201")
		n1 := e.do("POST", "/v1/policy/final", "agent-token", `{}`, "Idempotency-Key", "n1", "X-Status", "500")
		n2 := e.do("POST", "/v1/policy/final", "agent-token", `{}`, "Idempotency-Key", "n1", "X-Status", "201")
		if f1.status != 409 || f2.status != 409 || f2.header.Get("Idempotent-Replayed") != "true" || n1.status != 500 ||
			n2.status != 201 || e.up.count("/v1/policy/final") != 3 {
			t.Fatalf("outcomes: %d %d %d %d, %d effects", f1.status, f2.status, n1.status, n2.status, e.up.count("/v1/policy/final"))
		}
	})
}

// TestAgentCredentialsNeverReachTheUpstream: even an upstream the gateway
// adds no credentials for never sees the agent's token.
func TestAgentCredentialsNeverReachTheUpstream(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		e.do("POST", "/v1/policy/bare", "agent-token", `{}`, "Idempotency-Key", "b1", "Prefer", "wait=5")
		h := e.up.lastHeaders()
		if h.Get("Authorization") != "" || h.Get("Prefer") != "" || h.Get("Idempotency-Key") != "" {
			t.Fatalf("upstream saw %v", h)
		}
	})
}

func TestBackgroundSweepAndPurge(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		c := context.Background()
		lapsing, err := e.store.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
			Tenant: "acme", Key: "crashed", Route: "POST /v1/tickets",
			Fingerprint: "sha256:x", Lease: time.Millisecond, Retention: time.Hour, Actor: "dead-gateway"})
		if err != nil {
			t.Fatal(err)
		}
		old, err := e.store.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
			Tenant: "acme", Key: "old", Route: "POST /v1/tickets",
			Fingerprint: "sha256:x", Lease: time.Hour, Retention: time.Millisecond, Actor: "gw"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Complete(c, *old.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(c)
		defer cancel()
		go e.g.RunBackground(ctx)
		deadline := time.Now().Add(10 * time.Second)
		for {
			op, _ := e.store.Get(c, lapsing.Op.ID)
			_, gone := e.store.Get(c, old.Op.ID)
			if op.State == ledger.Unknown && errors.Is(gone, ledger.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 10s: lapsed lease %s, expired operation %v", op.State, gone)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func TestControlAPIPagingIsTenantScoped(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		for _, k := range []string{"u1", "u2", "u3"} {
			e.do("POST", "/v1/lost", "agent-token", `{}`, "Idempotency-Key", k)
		}
		e.do("POST", "/v1/lost", "globex-token", `{}`, "Idempotency-Key", "g1")
		var seen []string
		next := ""
		for page := 0; page < 5; page++ {
			path := "/_idem/v1/operations?state=unknown&limit=2"
			if next != "" {
				path += "&after=" + next
			}
			var lv contract.ListView
			r := e.do("GET", path, "agent-token", "")
			if err := json.Unmarshal([]byte(r.body), &lv); err != nil || r.status != 200 {
				t.Fatalf("page %d: %d %s", page, r.status, r.body)
			}
			for _, op := range lv.Operations {
				if op.Tenant != "acme" {
					t.Fatalf("another tenant's operation listed: %+v", op)
				}
				seen = append(seen, op.Key)
			}
			if lv.Next == nil {
				break
			}
			next = *lv.Next
		}
		if strings.Join(seen, ",") != "u1,u2,u3" {
			t.Fatalf("paged %v", seen)
		}
	})
}

// TestNoBlindRetryByTheTransport: Go's transport re-sends, on its own, a
// request with an Idempotency-Key whose reused connection fails after it
// was written. A bodiless write (a capture) whose answer is lost must still
// reach the upstream once.
func TestNoBlindRetryByTheTransport(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "warm") // a reusable connection
		r := e.do("POST", "/v1/lost", "agent-token", "", "Idempotency-Key", "capture-1")
		if r.status != 502 || code(r) != "outcome_unknown" || e.up.count("/v1/lost") != 1 {
			t.Fatalf("%d effects for one lost bodiless write: %+v", e.up.count("/v1/lost"), r)
		}
	})
}
