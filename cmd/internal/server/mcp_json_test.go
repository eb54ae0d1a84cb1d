package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
)

// TestMCPAnswersJSON: the proxy answers a tools/call with one
// application/json body, not an SSE stream, to a client that accepts
// both (the cheaper answer; docs/design.md, "MCP proxy"), and the body is
// the whole answer: the call made once, its retry replayed from it.
func TestMCPAnswersJSON(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		headers := []string{"Accept", "application/json, text/event-stream", "Mcp-Session-Id", s.ID(),
			"Mcp-Protocol-Version", s.InitializeResult().ProtocolVersion}
		call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_ticket",` +
			`"arguments":{"intent":"json-1","title":"t"}}}`
		for i, replayed := range []bool{false, true} {
			r := e.do("POST", "/mcp/tickets", "agent-token", call, headers...)
			if ct := r.header.Get("Content-Type"); r.status != 200 || !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("call %d: %d %q %s, want 200 application/json", i, r.status, ct, r.body)
			}
			var msg struct {
				ID     int `json:"id"`
				Result struct {
					IsError bool           `json:"isError"`
					Meta    map[string]any `json:"_meta"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(r.body), &msg); err != nil || msg.ID != 7 || msg.Result.IsError {
				t.Fatalf("call %d: %v %s", i, err, r.body)
			}
			if got := msg.Result.Meta[contract.MetaReplayed] == true; got != replayed {
				t.Fatalf("call %d: replayed %v, want %v: %s", i, got, replayed, r.body)
			}
		}
		if n := e.effectCount(); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}
