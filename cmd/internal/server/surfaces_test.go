package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/surfacetest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// TestSurfaces runs internal/surfacetest, every guarantee on every
// surface, against one real gateway per store: HTTP routes, actions, MCP
// tool calls (a Streamable HTTP mcpcounter), signed webhooks and NATS and
// AMQP consumers, all of the same tenants, on one store.
func TestSurfaces(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		g := newSuiteGateway(t, db)
		surfacetest.Run(t, g.surfaces(t))
		t.Run("MCPCases", func(t *testing.T) { mcpCases(t, g) })
		t.Run("ConsumerCases", func(t *testing.T) { consumerCases(t, g) })
	})
}

// suiteConfig is the suite's gateway: the counting upstream (suite), the
// one a test takes down (flaky), each surface's routes to them, and the
// MCP server and consumers the suite adds (%[4]s).
const suiteConfig = `store: %[1]s
sweep_interval: 50ms
upstreams:
  suite: {url: %[2]s, timeout: 5s, forward_key: true}
  flaky: {url: %[3]s, timeout: 5s}
principals:
  - {name: agent, tenant: acme, roles: [agent], token_sha256: %[5]s}
  - {name: alice, tenant: acme, roles: [admin], token_sha256: %[6]s}
  - {name: other, tenant: globex, roles: [agent], token_sha256: %[7]s}
  - {name: bot, tenant: acme, roles: [agent], token_sha256: %[8]s}
  - {name: bot/x, tenant: acme, roles: [agent], token_sha256: %[9]s}
routes:
  - {match: POST /s/ok, upstream: suite, max_body: 16KiB}
  - {match: POST /s/lost, upstream: suite}
  - {match: POST /s/flaky, upstream: flaky}
  - {match: POST /s/approve, upstream: suite, approval: {when: 'true', approvers: [admin], summary: 'Approve'}}
  - {match: POST /hooks/acme/ok, upstream: suite, max_body: 16KiB, webhook: {scheme: standard, secret: "` + standardSecret + `", tenant: acme}}
  - {match: POST /hooks/acme/lost, upstream: suite, webhook: {scheme: standard, secret: "` + standardSecret + `", tenant: acme}}
  - {match: POST /hooks/acme/flaky, upstream: flaky, webhook: {scheme: standard, secret: "` + standardSecret + `", tenant: acme}}
  - {match: POST /hooks/acme/approve, upstream: suite, approval: {when: 'true', approvers: [admin], summary: 'Approve'}, webhook: {scheme: standard, secret: "` + standardSecret + `", tenant: acme}}
  - {match: POST /hooks/globex/ok, upstream: suite, webhook: {scheme: standard, secret: "` + standardSecret + `", tenant: globex}}
actions:
  - {name: suite.send, lease: 5s, max_body: 16KiB}
  - {name: suite.short, lease: 100ms}
  - {name: suite.approve, approval: {when: 'true', approvers: [admin], summary: 'Approve'}}
%[4]s`

// suiteGateway is one store's gateway and what the surfaces count.
type suiteGateway struct {
	*env
	counter *markerCounter
	flaky   *switchable
	mcp     *restartableCounter
	brokers []*broker
}

func newSuiteGateway(t *testing.T, db dbtest.DB) *suiteGateway {
	counter := &markerCounter{n: map[string]int{}}
	suite := httptest.NewServer(counter)
	t.Cleanup(suite.Close)
	flaky := newSwitchable(t, counter)
	mc := newRestartableCounter(t)
	nb, natsYAML := newNATS(t)
	ab, amqpYAML := newAMQP(t)
	more := mc.config() + "consumers:\n" + natsYAML + amqpYAML
	text := fmt.Sprintf(suiteConfig, db.DSN, suite.URL, "http://"+flaky.addr, more,
		sha("agent-token"), sha("alice-token"), sha("globex-token"), sha("bot-token"), sha("botx-token"))
	cfg := loadConfig(t, t.TempDir(), text)
	logs := &logBuffer{}
	store := db.Open(t)
	g, err := server.New(cfg, store, slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.RunBackground(ctx) }() // the lease sweep
	t.Cleanup(func() { cancel(); <-done })
	gw := httptest.NewServer(g.Handler())
	t.Cleanup(gw.Close)
	e := &env{t: t, store: store, gw: gw, g: g, logs: logs}
	sg := &suiteGateway{env: e, counter: counter, flaky: flaky, mcp: mc, brokers: []*broker{nb, ab}}
	sg.runConsumers(t)
	return sg
}

func (g *suiteGateway) surfaces(t *testing.T) []surfacetest.Surface {
	return append([]surfacetest.Surface{
		&httpSurface{g},
		&actionSurface{suiteGateway: g, effects: &markerCounter{n: map[string]int{}}},
		&mcpSurface{suiteGateway: g},
		&webhookSurface{g},
	}, g.consumerSurfaces()...)
}

// tokens are the principals' tokens of each tenant (agent, other).
var tokens = map[string]string{surfacetest.TenantA: "agent-token", surfacetest.TenantB: "globex-token"}

// markerCounter is the counting upstream: a command's effect is counted
// by its marker (/case), its answer names the marker and the count, and
// on a path ending in /lost the answer is lost after the effect.
type markerCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *markerCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var cmd struct {
		Case string `json:"case"`
	}
	_ = json.NewDecoder(r.Body).Decode(&cmd)
	n := c.add(cmd.Case)
	if _, status, ok := strings.Cut(r.URL.Path, "/status/"); ok { // the upstream answers this status
		code, _ := strconv.Atoi(status)
		w.WriteHeader(code)
		return
	}
	if strings.HasSuffix(r.URL.Path, "/lost") {
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(201)
	fmt.Fprintf(w, `{"case":%q,"n":%d}`, cmd.Case, n)
}

func (c *markerCounter) add(marker string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[marker]++
	return c.n[marker]
}

func (c *markerCounter) count(marker string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[marker]
}

// switchable serves h at an address of its own that a test can make
// refuse connections (Down: nothing listens) and serve again (Up). Two
// surfaces share it: it is down while either holds it down. It keeps no
// connection alive: a gateway's pooled connection that Down closed under
// it would carry the next request into a socket its peer had closed, an
// ambiguous loss (unknown), not the refusal a down upstream is here.
type switchable struct {
	addr  string
	h     http.Handler
	mu    sync.Mutex
	srv   *http.Server
	downs int
}

func newSwitchable(t testing.TB, h http.Handler) *switchable {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &switchable{addr: ln.Addr().String(), h: h}
	s.serve(ln)
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// Down closes the listener and every connection: a dial is refused.
func (s *switchable) Down(testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.downs++; s.downs == 1 {
		_ = s.srv.Close()
	}
}

// Up listens at the same address again, once no one holds it down.
func (s *switchable) Up(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.downs--; s.downs > 0 {
		return
	}
	ln, err := listenAgain(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	s.serve(ln)
}

// serve serves ln, answering each request with Connection: close.
func (s *switchable) serve(ln net.Listener) {
	s.srv = &http.Server{Handler: s.h}
	s.srv.SetKeepAlivesEnabled(false)
	go s.srv.Serve(ln)
}

// listenAgain listens at addr, which was just closed (the kernel may take
// a moment to let it go): tried until it can, up to testenv.Bound, a
// bound for a port never freed rather than a window a loaded machine
// must meet.
func listenAgain(addr string) (net.Listener, error) {
	var err error
	for deadline := time.Now().Add(testenv.Bound); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
	}
	return nil, err
}

// outcomeOf maps a gateway's HTTP answer to the executor's outcome.
func outcomeOf(r reply) surfacetest.Outcome {
	switch {
	case r.status == 201 && r.header.Get(contract.HeaderReplayed) == "true":
		return surfacetest.Replayed
	case r.status == 201:
		return surfacetest.Executed
	}
	switch code(r) {
	case contract.CodeFingerprintMismatch:
		return surfacetest.Refused
	case contract.CodeOutcomeUnknown:
		return surfacetest.Unknown
	case contract.CodeUpstreamUnavailable:
		return surfacetest.Released
	case contract.CodeInProgress:
		return surfacetest.InProgress
	case contract.CodeApprovalRequired:
		return surfacetest.Pending
	case contract.CodePayloadTooLarge:
		return surfacetest.TooLarge
	}
	return surfacetest.Other
}

// command is the JSON command of a call on the HTTP surfaces; an
// oversized one is padded past 16KiB, the suite's routes' and actions'
// max_body.
func command(c surfacetest.Call) string {
	return commandOf(c, 32<<10)
}

// commandOf is command padded past limit when c asks for it.
func commandOf(c surfacetest.Call, limit int) string {
	pad := ""
	if c.Oversize {
		pad = strings.Repeat("p", limit+1)
	}
	return fmt.Sprintf(`{"case":%q,"v":%q,"pad":%q}`, c.Marker, c.Variant, pad)
}

// httpSurface: a keyed POST on an HTTP route.
type httpSurface struct{ *suiteGateway }

func (s *httpSurface) Name() string { return "http" }

func (s *httpSurface) Store() ledger.Store { return s.store }

func (s *httpSurface) Send(t testing.TB, c surfacetest.Call) surfacetest.Answer {
	path := map[surfacetest.Upstream]string{surfacetest.Answers: "/s/ok", surfacetest.LosesAnswer: "/s/lost",
		surfacetest.Breakable: "/s/flaky", surfacetest.NeedsApproval: "/s/approve"}[c.Upstream]
	r := s.doAs(t, "POST", path, tokens[c.Tenant], command(c), "Idempotency-Key", c.Key)
	return surfacetest.Answer{Outcome: outcomeOf(r), Body: []byte(r.body), OpID: r.header.Get(contract.HeaderOperation)}
}

func (s *httpSurface) Effects(_ testing.TB, marker string) int { return s.counter.count(marker) }

func (s *httpSurface) Key(c surfacetest.Call) ledger.OpKey {
	return ledger.OpKey{Tenant: c.Tenant, Namespace: ledger.NamespaceClients, Key: c.Key}
}

func (s *httpSurface) Skips() map[string]string { return nil }

func (s *httpSurface) Down(t testing.TB) { s.flaky.Down(t) }

func (s *httpSurface) Up(t testing.TB) { s.flaky.Up(t) }

// doAs is env.do from any goroutine's test.
func (e *env) doAs(t testing.TB, method, path, token, body string, headers ...string) reply {
	req, _ := http.NewRequest(method, e.gw.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// Decide decides an approval as the tenant's requester (its agent) or its
// approver (acme's alice; globex has none).
func (g *suiteGateway) Decide(t testing.TB, tenant, id, fingerprint string, asRequester bool) int {
	token := "alice-token"
	if asRequester {
		token = tokens[tenant]
	}
	r := g.doAs(t, "POST", "/_idem/v1/approvals/"+id+"/approve", token, fmt.Sprintf(`{"fingerprint":%q,"note":"suite"}`, fingerprint))
	return r.status
}
