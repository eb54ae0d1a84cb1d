package server_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
)

// newMCPSessionsEnv is the tickets proxy with mcp_sessions set, on a
// clock the test moves.
func newMCPSessionsEnv(t *testing.T, sessions string) (*mcpEnv, *testClock) {
	clock := newTestClock()
	db := dbtest.SQLiteDB(t)
	effects := filepath.Join(t.TempDir(), "effects.jsonl")
	e := &mcpEnv{env: newEnvWith(t, db.Open(t), db.DSN, fmt.Sprintf(mcpServersTemplate, counterBinary(t), effects,
		"mcp_sessions: "+sessions+"\n"), nil, server.WithClock(clock.Now)), effects: effects}
	t.Cleanup(e.g.Close)
	return e, clock
}

// connect opens an MCP session as the holder of token, or says why not.
// It returns once the proxy has handled the client's initialized
// notification (a notification is answered before it is handled; the
// ping after it is handled after it): the session is then idle.
func (e *mcpEnv) connect(token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.gw.URL + contract.MCPPath + "/tickets",
		HTTPClient: &http.Client{Transport: withToken{token}}, MaxRetries: -1}, nil)
	if err != nil {
		return nil, err
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return s, s.Ping(context.Background(), nil)
}

// TestMCPSessionLimits: one principal holds at most max_per_principal
// sessions, the gateway max; a session past either is refused at its
// initialize, saying which setting, and counted; the others' sessions
// are untouched, and a refused one is never open.
func TestMCPSessionLimits(t *testing.T) {
	e, _ := newMCPSessionsEnv(t, "{max_per_principal: 2, max: 3}")
	for range 2 {
		if _, err := e.connect("agent-token"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.connect("agent-token"); err == nil || !strings.Contains(err.Error(), "mcp_sessions.max_per_principal") {
		t.Fatalf("a third session of one principal: %v", err)
	}
	other, err := e.connect("globex-token")
	if err != nil {
		t.Fatalf("another principal's first session: %v", err)
	}
	if _, err := e.connect("alice-token"); err == nil || !strings.Contains(err.Error(), "mcp_sessions.max") {
		t.Fatalf("a fourth session on the gateway: %v", err)
	}
	if err := other.Ping(context.Background(), nil); err != nil {
		t.Fatalf("an open session after the refusals: %v", err)
	}
	m := e.scrape()
	for sel, want := range map[string]float64{"idemgate_mcp_sessions_open": 3, "idemgate_mcp_sessions_expired_total": 0,
		"idemgate_mcp_sessions_refused_total{limit=per_principal}": 1, "idemgate_mcp_sessions_refused_total{limit=max}": 1} {
		if got := value(m, sel); got != want {
			t.Errorf("%s = %v, want %v", sel, got, want)
		}
	}
}

// TestMCPIdleSessionsExpire: a session no request used for idle_timeout
// is closed, and counted, when the next session is admitted (and by the
// periodic sweep): its principal's place is free again, its client's
// next request finds no session. A session in use is kept.
func TestMCPIdleSessionsExpire(t *testing.T) {
	e, clock := newMCPSessionsEnv(t, "{idle_timeout: 1m, max_per_principal: 2}")
	used, err := e.connect("agent-token")
	if err != nil {
		t.Fatal(err)
	}
	forgotten, err := e.connect("agent-token")
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(40 * time.Second)
	if err := used.Ping(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Second) // forgotten: 70s idle; used: 30s
	if _, err := e.connect("agent-token"); err != nil {
		t.Fatalf("a new session once one idled past the timeout: %v", err)
	}
	if err := forgotten.Ping(context.Background(), nil); err == nil {
		t.Error("the idle session still answers")
	}
	if err := used.Ping(context.Background(), nil); err != nil {
		t.Errorf("the session in use was closed: %v", err)
	}
	m := e.scrape()
	if got := value(m, "idemgate_mcp_sessions_expired_total"); got != 1 {
		t.Errorf("expired: %v, want 1", got)
	}
	if got := value(m, "idemgate_mcp_sessions_open"); got != 2 {
		t.Errorf("open: %v, want 2", got)
	}
}

// TestMCPSessionsAreTheirOwners: a session is used by the principal who
// opened it, compared as (tenant, name): neither another principal nor
// one whose tenant and name join to the same text (tenant acme/agentA's
// x, tenant acme's agentA/x) may use it, and the refusal is a JSON-RPC
// error, as MCP clients read one.
func TestMCPSessionsAreTheirOwners(t *testing.T) {
	more := "  - {name: x, tenant: acme/agentA, roles: [agent], token_sha256: " + sha("slash-tenant-token") + "}\n" +
		"  - {name: agentA/x, tenant: acme, roles: [agent], token_sha256: " + sha("slash-name-token") + "}\n"
	db := dbtest.SQLiteDB(t)
	effects := filepath.Join(t.TempDir(), "effects.jsonl")
	e := &mcpEnv{env: newEnvEdited(t, db.Open(t), db.DSN, fmt.Sprintf(mcpServersTemplate, counterBinary(t), effects, ""), nil,
		func(s string) string { return strings.Replace(s, "principals:\n", "principals:\n"+more, 1) }), effects: effects}
	t.Cleanup(e.g.Close)
	s, err := e.connect("slash-name-token")
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{"slash-tenant-token", "globex-token"} {
		req, _ := http.NewRequest("POST", e.gw.URL+contract.MCPPath+"/tickets",
			strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Mcp-Session-Id", s.ID())
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		r := roundTrip(t, req)
		if r.status != 403 || r.header.Get("Content-Type") != "application/json" ||
			!strings.Contains(r.body, `"jsonrpc":"2.0"`) || !strings.Contains(r.body, `"error":{"code":`) {
			t.Errorf("%s using another's session: %d %s %s", token, r.status, r.header.Get("Content-Type"), r.body)
		}
	}
	if err := s.Ping(context.Background(), nil); err != nil {
		t.Fatalf("the owner's session: %v", err)
	}
}
