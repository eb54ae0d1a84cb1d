package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// TestMCPCredentialsStayWithTheirOrigin: an HTTP MCP server's configured
// headers reach its configured origin only. A redirect, at start-up or
// in answer to a call, is never followed: the other origin sees no
// request at all, and the call it answered is unknown (the server had it).
func TestMCPCredentialsStayWithTheirOrigin(t *testing.T) {
	t.Parallel()
	effects := filepath.Join(t.TempDir(), "http-effects.jsonl")
	target, _ := url.Parse("http://" + startHTTPCounter(t, effects, "cred-7"))
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		if strings.Contains(fmt.Sprint(r.Header), "cred-7") {
			t.Errorf("another origin was sent the credentials: %v", r.Header)
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(other.Close)
	var redirect atomic.Bool
	var redirected atomic.Int32
	redirect.Store(true)
	pass := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if redirect.Load() {
			redirected.Add(1)
			http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		pass.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e := newMCPEnv(t, dbtest.SQLiteDB(t), fmt.Sprintf(
		"  - {name: remote, url: '%s/mcp', timeout: 1s, headers: {Authorization: 'Bearer cred-7'}}\n", front.URL))
	e.effects = effects
	eventually(t, "the start-up was redirected", func() bool { return redirected.Load() > 0 })
	eventually(t, "the start-up's redirect is logged", func() bool {
		return strings.Contains(e.logs.String(), "redirect")
	})
	redirect.Store(false)
	s := e.session("agent-token", "remote", nil)
	eventually(t, "the server is connected", func() bool {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "create_ticket",
			Arguments: map[string]any{"intent": "first", "title": "t"}})
		return err == nil && !res.IsError
	})
	redirect.Store(true)
	res := callTool(t, s, "create_ticket", map[string]any{"intent": "redirected", "title": "t"})
	if codeOf(res) != contract.CodeOutcomeUnknown || strings.Count(e.logs.String(), "does not follow") < 2 {
		t.Fatalf("a call answered with a redirect: %+v %s", res, textOf(res))
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the other origin was sent %d requests", n)
	}
}

// TestMCPAnswerSizeIsBounded: an HTTP MCP server's answer is read up to
// 16 MiB, as a stdio line is, whether it comes as one JSON body or as a
// stream: a 64 MiB answer is not read past the bound, its call is
// unknown (the effect happened; the proxy did not read its result), and
// the session goes on for the next call.
func TestMCPAnswerSizeIsBounded(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"stream", "json"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			effects := filepath.Join(t.TempDir(), "http-effects.jsonl")
			var more []string
			if mode == "json" {
				more = append(more, "-json")
			}
			p := testenv.NewProxy(t, startHTTPCounter(t, effects, "", more...))
			e := newMCPEnv(t, dbtest.SQLiteDB(t), fmt.Sprintf("  - {name: remote, url: 'http://%s/mcp', timeout: 20s}\n", p.Addr))
			e.effects = effects
			s := e.session("agent-token", "remote", nil)
			before := p.FromServer()
			res := callTool(t, s, "big", map[string]any{"intent": "huge", "title": "t", "bytes": 64 << 20})
			if codeOf(res) != contract.CodeOutcomeUnknown || !strings.Contains(e.logs.String(), "larger than") {
				t.Fatalf("a 64 MiB answer: %.300s", textOf(res))
			}
			if read := p.FromServer() - before; read > 40<<20 {
				t.Fatalf("%d MiB of the answer were read, want at most the 16 MiB bound (and socket buffers)", read>>20)
			}
			op, err := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme",
				Namespace: ledger.MCPNamespace("remote"), Key: contract.MCPIntentKey("big", "agent", "huge")})
			if err != nil || op.State != ledger.Unknown {
				t.Fatalf("the operation: %+v %v", op, err)
			}
			sessions := e.g.MCP().Started("remote")
			if next := callTool(t, s, "big", map[string]any{"intent": "small", "title": "t", "bytes": 10}); next.IsError {
				t.Fatalf("the next call: %s", textOf(next))
			}
			if n, started := e.effectCount(), e.g.MCP().Started("remote")-sessions; n != 2 || started != 0 {
				t.Fatalf("%d effects, %d new sessions: want 2 and 0", n, started)
			}
		})
	}
}

// TestMCPOversizedAnswerEndsOnlyItsCall: a stdio server's answer over
// 16 MiB ends its own call (unknown), not the session every caller
// shares: another principal's call in flight gets its result, and the
// server's process goes on.
func TestMCPOversizedAnswerEndsOnlyItsCall(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newMCPEnv(t, dbtest.SQLiteDB(t), fmt.Sprintf("  - {name: big, command: [%s, -effects, %s], timeout: 60s}\n",
		counterBinary(t), filepath.Join(dir, "effects.jsonl")))
	e.effects = filepath.Join(dir, "effects.jsonl")
	alice, agent := e.session("alice-token", "big", nil), e.session("agent-token", "big", nil)
	gate := filepath.Join(dir, "gate")
	var held *mcp.CallToolResult
	var wg sync.WaitGroup
	wg.Go(func() {
		held = callTool(t, alice, "gated_ticket", map[string]any{"intent": "in flight", "title": "a", "gate": gate})
	})
	eventually(t, "alice's call is in flight", func() bool {
		op, err := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.MCPNamespace("big"),
			Key: contract.MCPIntentKey("gated_ticket", "alice", "in flight")})
		return err == nil && op.State == ledger.Executing
	})
	eventually(t, "alice's tenant has its process", func() bool { return e.g.MCP().Started("big") == 2 }) // and the lister
	processes := e.g.MCP().Started("big")
	res := callTool(t, agent, "big", map[string]any{"intent": "huge", "title": "b", "bytes": 17 << 20})
	if codeOf(res) != contract.CodeOutcomeUnknown || !strings.Contains(e.logs.String(), "larger than") {
		t.Fatalf("a 17 MiB answer: %.300s", textOf(res))
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if held.IsError {
		t.Fatalf("the other principal's call: %s", textOf(held))
	}
	if n, started := e.effectCount(), e.g.MCP().Started("big")-processes; n != 2 || started != 0 {
		t.Fatalf("%d effects, %d processes started: want 2 and 0", n, started)
	}
	if next := callTool(t, agent, "create_ticket", map[string]any{"intent": "after", "title": "c"}); next.IsError {
		t.Fatalf("the next call: %s", textOf(next))
	}
}

// TestMCPURLSecretsAreNotShown: what of an MCP server's url may be a
// secret (userinfo, path, query) is in no answer to a client and no log
// line, whatever failed; only its origin is.
func TestMCPURLSecretsAreNotShown(t *testing.T) {
	t.Parallel()
	effects := filepath.Join(t.TempDir(), "http-effects.jsonl")
	p := testenv.NewProxy(t, startHTTPCounter(t, effects, ""))
	e := newMCPEnv(t, dbtest.SQLiteDB(t), fmt.Sprintf(
		"  - {name: remote, url: 'http://user-s1:pass-s2@%s/mcp/path-s3?key=query-s4', timeout: 1s}\n", p.Addr))
	s := e.session("agent-token", "remote", nil)
	if res := callTool(t, s, "count_effects", nil); res.IsError {
		t.Fatalf("before: %s", textOf(res))
	}
	p.Down()
	var seen strings.Builder
	for _, call := range []struct {
		tool string
		args map[string]any
	}{{"count_effects", nil}, {"create_ticket", map[string]any{"intent": "down", "title": "t"}}} {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: call.tool, Arguments: call.args})
		if err != nil {
			seen.WriteString(err.Error())
			continue
		}
		if !res.IsError {
			t.Fatalf("%s with the server down: %s", call.tool, textOf(res))
		}
		seen.WriteString(textOf(res))
	}
	eventually(t, "the reconnection is logged", func() bool { return strings.Contains(e.logs.String(), "connect") })
	seen.WriteString(e.logs.String())
	for _, secret := range []string{"user-s1", "pass-s2", "path-s3", "query-s4"} {
		if strings.Contains(seen.String(), secret) {
			t.Errorf("%s was shown: %s", secret, seen.String())
		}
	}
}

// TestMCPReconnectLogsOnce: a stdio server started again is one log line
// at WARN, however many clients are connected: its tools did not change,
// so no client is told they did.
func TestMCPReconnectLogsOnce(t *testing.T) {
	t.Parallel()
	e := newMCPEnv(t, dbtest.SQLiteDB(t), "")
	sessions := make([]*mcp.ClientSession, 4)
	for i := range sessions {
		// Clients that open no standalone stream cannot be told anything.
		c := mcp.NewClient(&mcp.Implementation{Name: "quiet-agent", Version: "1"}, nil)
		s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.gw.URL + "/mcp/tickets",
			HTTPClient: &http.Client{Transport: withToken{"agent-token"}}, DisableStandaloneSSE: i > 0}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		sessions[i] = s
	}
	before := e.g.MCP().Started("tickets")
	callTool(t, sessions[0], "die", map[string]any{"intent": "restart", "title": "x"})
	eventually(t, "the server is started again", func() bool { return e.g.MCP().Started("tickets") > before })
	if res := callTool(t, sessions[1], "create_ticket", map[string]any{"intent": "after", "title": "y"}); res.IsError {
		t.Fatalf("after the restart: %s", textOf(res))
	}
	var warns []string
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) {
			warns = append(warns, line)
		}
	}
	if len(warns) != 1 {
		t.Fatalf("%d WARN lines for one restart, want 1:\n%s", len(warns), strings.Join(warns, "\n"))
	}
}

// TestMCPServerEnvironment: a stdio server's env is added to its
// environment: here, where mcpcounter writes its effects.
func TestMCPServerEnvironment(t *testing.T) {
	t.Parallel()
	effects := filepath.Join(t.TempDir(), "env-effects.jsonl")
	e := newMCPEnv(t, dbtest.SQLiteDB(t), fmt.Sprintf("  - {name: envd, command: [%s], env: {MCPCOUNTER_EFFECTS: %s}}\n",
		counterBinary(t), effects))
	e.effects = effects
	if res := callTool(t, e.session("agent-token", "envd", nil), "create_ticket", map[string]any{"intent": "e", "title": "t"}); res.IsError {
		t.Fatalf("%s", textOf(res))
	}
	if n := e.effectCount(); n != 1 {
		t.Fatalf("%d effects in the file env named, want 1", n)
	}
}
