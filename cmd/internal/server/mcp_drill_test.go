package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgate/idemgate/drill"
	"github.com/idemgate/idemgate/internal/dbtest"
)

// mcpDrill runs the MCP drill's scenario against target, with intent as
// the intent's argument ("" for none), effects counted by count_effects.
func mcpDrill(t *testing.T, target, token, intent string) map[string]drill.Result {
	t.Helper()
	text := fmt.Sprintf("mcp:\n  target: %s\n  headers: {Authorization: 'Bearer %s'}\n  tool: create_ticket\n"+
		"  arguments: '{\"title\": \"drill {{.run}} {{.n}}\"}'\n  intent: %q\n"+
		"  effects: {tool: count_effects, pointer: /count}\n", target, token, intent)
	path := filepath.Join(t.TempDir(), "mcp-drill.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); !drill.IsMCPScenario(data) {
		t.Fatal("an MCP scenario is not recognised as one")
	}
	s, err := drill.LoadMCPScenario(path)
	if err != nil {
		t.Fatal(err)
	}
	results, err := (&drill.MCPRunner{Scenario: s}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]drill.Result{}
	for _, r := range results {
		out[r.ID] = r
	}
	return out
}

// TestMCPDrill: the MCP drill grades a write tool straight to the server
// (no retry identity: duplicates) and through the proxy (every check
// passed), by the effects count_effects counts.
func TestMCPDrill(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newMCPEnv(t, db, "")
		for id, r := range mcpDrill(t, e.gw.URL+"/mcp/tickets", "agent-token", "intent") {
			if r.Verdict != drill.Passed || r.Effects != 1 {
				t.Errorf("through the proxy, %s: %+v", id, r)
			}
		}
	})
	t.Run("straight", func(t *testing.T) {
		addr := startHTTPCounter(t, filepath.Join(t.TempDir(), "effects.jsonl"), "")
		got := mcpDrill(t, "http://"+addr+"/mcp", "none", "")
		for _, id := range []string{"mcp-lost", "mcp-concurrent", "mcp-changed", "mcp-restart"} {
			if r := got[id]; r.Verdict != drill.FailedCheck || r.Effects <= 1 {
				t.Errorf("straight to the server, %s: %+v", id, r)
			}
		}
	})
}
