package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
)

// TestMCPBadInputChangesNothing: each bad request is refused with nothing
// forwarded and nothing recorded, saying what is wrong (never the
// gateway's own files).
func TestMCPBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",` +
			`"capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
		mcpHeaders := []string{"Accept", "application/json, text/event-stream"}
		for _, c := range []struct {
			name, path, token, body string
			status                  int
		}{
			{"a bad token", "/mcp/tickets", "guess", initialize, 401},
			{"no token", "/mcp/tickets", "", initialize, 401},
			{"an unknown server", "/mcp/nothing", "agent-token", initialize, 404},
			{"a JSON-RPC batch", "/mcp/tickets", "agent-token", "[" + initialize + "]", 400},
			{"a malformed message", "/mcp/tickets", "agent-token", `{"jsonrpc":"2.0","id":1,"method":`, 400},
		} {
			if r := e.do("POST", c.path, c.token, c.body, mcpHeaders...); r.status != c.status {
				t.Errorf("%s: %d %s, want %d", c.name, r.status, r.body, c.status)
			}
		}
		// A call without a session is the client's error: it is told, and
		// the log takes it below ERROR.
		noSession := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"count_effects","arguments":{}}}`
		if r := e.do("POST", "/mcp/tickets", "agent-token", noSession, mcpHeaders...); !strings.Contains(r.body, `"error"`) {
			t.Errorf("a call without a session: %d %s", r.status, r.body)
		}
		if logs := e.logs.String(); strings.Contains(logs, `"level":"ERROR"`) {
			t.Errorf("a client's error logged at ERROR: %s", logs)
		}
		s := e.session("agent-token", "tickets", nil)
		// A session is its opener's: another principal's token on it is refused.
		call := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"count_effects","arguments":{}}}`
		onSession := append(mcpHeaders, "Mcp-Session-Id", s.ID(), "Mcp-Protocol-Version", s.InitializeResult().ProtocolVersion)
		if r := e.do("POST", "/mcp/tickets", "agent-token", call, onSession...); r.status != 200 {
			t.Errorf("its opener on the session: %d %s", r.status, r.body)
		}
		if r := e.do("POST", "/mcp/tickets", "globex-token", call, onSession...); r.status != 403 && r.status != 404 {
			t.Errorf("another principal on agent's session: %d %s", r.status, r.body)
		}
		for _, c := range []struct {
			name string
			args map[string]any
			code string
		}{
			{"no intent", map[string]any{"title": "t"}, contract.CodeMissingKey},
			{"an empty intent", map[string]any{"intent": "", "title": "t"}, contract.CodeMissingKey},
			{"an intent over 128 characters", map[string]any{"intent": strings.Repeat("i", 129), "title": "t"}, contract.CodeMissingKey},
			{"an intent not ASCII", map[string]any{"intent": "café", "title": "t"}, contract.CodeMissingKey},
			{"an intent not a string", map[string]any{"intent": 7, "title": "t"}, contract.CodeMissingKey},
			{"arguments failing the schema", map[string]any{"intent": "i", "title": 5}, contract.CodeInvalidCommand},
			{"an argument the schema does not have", map[string]any{"intent": "i", "title": "t", "extra": 1}, contract.CodeInvalidCommand},
		} {
			res := callTool(t, s, "create_ticket", c.args)
			if !res.IsError || codeOf(res) != c.code {
				t.Errorf("%s: %+v %s, want %s", c.name, res, textOf(res), c.code)
			}
			// A schema's refusal says what is wrong, never where the gateway runs.
			if wd, _ := os.Getwd(); strings.Contains(textOf(res), "file:") || strings.Contains(textOf(res), wd) {
				t.Errorf("%s: the refusal shows the gateway's files: %s", c.name, textOf(res))
			}
		}
		if n := e.effectCount(); n != 0 {
			t.Fatalf("%d effects after bad input", n)
		}
		if ops := e.operations(); len(ops) != 0 {
			t.Fatalf("bad input recorded %d operations", len(ops))
		}
	})
}

// TestMCPStreamableHTTPUpstream: a Streamable HTTP server is reached with
// its configured credentials, which its clients never see.
func TestMCPStreamableHTTPUpstream(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		effects := filepath.Join(t.TempDir(), "http-effects.jsonl")
		addr := startHTTPCounter(t, effects, "up-secret-7")
		e := newMCPEnv(t, db, fmt.Sprintf("  - {name: remote, url: 'http://%s/mcp', headers: {Authorization: 'Bearer up-secret-7'}}\n", addr))
		e.effects = effects
		s := e.session("agent-token", "remote", nil)
		list, err := s.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		args := map[string]any{"intent": "remote one", "title": "t"}
		first, again := callTool(t, s, "create_ticket", args), callTool(t, s, "create_ticket", args)
		if first.IsError || again.Meta[contract.MetaReplayed] != true || e.effectCount() != 1 {
			t.Fatalf("through HTTP: %+v %+v, %d effects", first, again, e.effectCount())
		}
		seen, _ := json.Marshal([]any{list, first, again})
		if strings.Contains(string(seen), "up-secret-7") {
			t.Fatal("the upstream's credentials reached the client")
		}
	})
}

// startHTTPCounter runs mcpcounter over Streamable HTTP with a token, and
// returns its address.
func startHTTPCounter(t testing.TB, effects, token string, more ...string) string {
	t.Helper()
	cmd := exec.Command(counterBinary(t), append([]string{"-effects", effects, "-http", "127.0.0.1:0", "-token", token}, more...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		t.Fatalf("mcpcounter -http: %q %v", line, err)
	}
	return addr
}

// TestMCPApprovals: a call its tool's policy holds waits for a human,
// named with its page, sent as an elicitation to a client that declares
// URL-mode elicitation; nothing is forwarded until it is approved, and
// then once.
func TestMCPApprovals(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		elicited := make(chan *mcp.ElicitParams, 4)
		s := e.session("agent-token", "tickets", &mcp.ClientOptions{
			Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
			ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				elicited <- r.Params
				return &mcp.ElicitResult{Action: "accept"}, nil
			}})
		args := map[string]any{"intent": "ship 1.4", "environment": "production", "artifact": "api:1.4"}
		wait := callTool(t, s, "deploy", args)
		id, _ := wait.Meta[contract.MetaApproval].(string)
		url, _ := wait.Meta[contract.MetaApprovalURL].(string)
		if codeOf(wait) != contract.CodeApprovalRequired || id == "" || !strings.HasSuffix(url, "/ui/approvals/"+id) ||
			!strings.Contains(textOf(wait), `"Deploy api:1.4"`) {
			t.Fatalf("a production deploy: %+v %s", wait, textOf(wait))
		}
		select {
		case p := <-elicited:
			if p.Mode != "url" || p.URL != url {
				t.Fatalf("the elicitation: %+v", p)
			}
		default:
			t.Fatal("no elicitation was sent")
		}
		if again := callTool(t, s, "deploy", args); codeOf(again) != contract.CodeApprovalRequired || e.effectCount() != 0 {
			t.Fatalf("a retry while pending: %+v, %d effects", again, e.effectCount())
		}
		a, err := e.store.GetApproval(context.Background(), id)
		if err != nil || a.Target != "MCP tickets/deploy" {
			t.Fatalf("the approval: %+v %v", a, err)
		}
		if r := e.do("POST", "/_idem/v1/approvals/"+id+"/approve", "alice-token",
			fmt.Sprintf(`{"fingerprint":%q,"note":"ok"}`, a.Fingerprint)); r.status != 200 {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		for range 2 {
			if res := callTool(t, s, "deploy", args); res.IsError {
				t.Fatalf("after the approval: %s", textOf(res))
			}
		}
		staging := map[string]any{"intent": "ship 1.4 to staging", "environment": "staging", "artifact": "api:1.4"}
		if res := callTool(t, s, "deploy", staging); res.IsError || e.effectCount() != 2 {
			t.Fatalf("staging needs no approval: %s, %d effects", textOf(res), e.effectCount())
		}
	})
}

// TestMCPMetricsAndAudit: a tool call's operations carry the route label
// mcp:<server>/<tool> in the metrics and their target in the audit log.
func TestMCPMetricsAndAudit(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		args := map[string]any{"intent": "m", "title": "t"}
		callTool(t, s, "create_ticket", args)
		callTool(t, s, "create_ticket", args)
		text := e.metricsText()
		if !strings.Contains(text, `route="mcp:tickets/create_ticket"`) {
			t.Fatal("no metrics labelled mcp:tickets/create_ticket")
		}
		op, err := e.store.GetByKey(context.Background(), intentKey("acme", "create_ticket", "agent", "m"))
		if err != nil || op.Target != "MCP tickets/create_ticket" || op.Principal != "agent" {
			t.Fatalf("the operation: %+v %v", op, err)
		}
	})
}
