package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// TestMCPServerRolesAndTenants: a server is open only to the principals
// of its tenants with one of its roles, and a tool with roles only to
// theirs; anyone else is refused (403 before any session, or a forbidden
// result), with nothing reserved and nothing sent.
func TestMCPServerRolesAndTenants(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := newMCPEnv(t, dbtest.SQLiteDB(t), fmt.Sprintf(`  - name: ops
    command: [%s, -effects, %s]
    roles: [agent, admin]
    tenants: [acme]
    tools:
      deploy: {roles: [admin]}
`, counterBinary(t), filepath.Join(dir, "effects.jsonl")))
	e.effects = filepath.Join(dir, "effects.jsonl")
	for token, why := range map[string]string{"globex-token": "not open to this tenant", "scraper-token": "needs one of the roles"} {
		r := e.do(http.MethodPost, contract.MCPPath+"/ops", token, `{"jsonrpc":"2.0","id":1,"method":"initialize",`+
			`"params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
			"Accept", "application/json, text/event-stream")
		if r.status != http.StatusForbidden || code(r) != contract.CodeForbidden || !strings.Contains(r.body, why) {
			t.Errorf("%s: %d %s", token, r.status, r.body)
		}
	}
	agent, alice := e.session("agent-token", "ops", nil), e.session("alice-token", "ops", nil)
	deploy := map[string]any{"intent": "ship", "environment": "staging", "artifact": "a"}
	refused := callTool(t, agent, "deploy", deploy)
	if codeOf(refused) != contract.CodeForbidden || !strings.Contains(textOf(refused), "admin") {
		t.Fatalf("a tool the principal has no role for: %s", textOf(refused))
	}
	key := ledger.OpKey{Tenant: "acme", Namespace: ledger.MCPNamespace("ops"), Key: contract.MCPIntentKey("deploy", "agent", "ship")}
	if _, err := e.store.GetByKey(context.Background(), key); err == nil {
		t.Fatal("a refused call reserved an operation")
	}
	if res := callTool(t, agent, "create_ticket", map[string]any{"intent": "t", "title": "t"}); res.IsError {
		t.Fatalf("agent: %s", textOf(res))
	}
	if res := callTool(t, alice, "deploy", deploy); res.IsError {
		t.Fatalf("alice, an admin: %s", textOf(res))
	}
	if n := e.effectCount(); n != 2 {
		t.Fatalf("%d effects, want 2", n)
	}
}

// TestMCPTenantIsolation: by default each tenant has its own upstream
// (here a stdio process), so state one tenant leaves in a stateful server
// is never read by another's; isolation: principal gives each principal
// its own, and shared one for all, as configured.
func TestMCPTenantIsolation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin, effects := counterBinary(t), filepath.Join(dir, "effects.jsonl")
	e := newMCPEnv(t, dbtest.SQLiteDB(t), fmt.Sprintf(`  - {name: mem, command: [%[1]s, -effects, %[2]s]}
  - {name: mem-principal, command: [%[1]s, -effects, %[2]s], isolation: principal}
  - {name: mem-idle, command: [%[1]s, -effects, %[2]s], isolated_idle: 100ms}
  - {name: mem-shared, command: [%[1]s, -effects, %[2]s], isolation: shared}
`, bin, effects))
	recall := func(token, server string) string {
		res := callTool(t, e.session(token, server, nil), "recall", nil)
		var m map[string]string
		_ = json.Unmarshal([]byte(textOf(res)), &m)
		return m["value"]
	}
	for _, server := range []string{"mem", "mem-principal", "mem-shared", "mem-idle"} {
		res := callTool(t, e.session("agent-token", server, nil), "remember", map[string]any{"intent": "keep", "value": "acme-secret"})
		if res.IsError {
			t.Fatalf("%s: %s", server, textOf(res))
		}
	}
	for _, c := range []struct{ token, server, want string }{
		{"agent-token", "mem", "acme-secret"},
		{"alice-token", "mem", "acme-secret"}, // the same tenant's
		{"globex-token", "mem", ""},
		{"alice-token", "mem-principal", ""},
		{"agent-token", "mem-principal", "acme-secret"},
		{"globex-token", "mem-shared", "acme-secret"}, // shared, as configured
	} {
		if got := recall(c.token, c.server); got != c.want {
			t.Errorf("%s on %s recalls %q, want %q", c.token, c.server, got, c.want)
		}
	}
	if n, m := e.g.MCP().Isolated("mem"), e.g.MCP().Isolated("mem-principal"); n != 2 || m != 2 {
		t.Errorf("%d and %d isolated upstreams, want 2 (acme, globex) and 2 (agent, alice)", n, m)
	}
	eventually(t, "an idle isolated upstream is stopped", func() bool { return e.g.MCP().Isolated("mem-idle") == 0 })
	if got := recall("agent-token", "mem-idle"); got != "" {
		t.Errorf("a process stopped when idle and started again recalls %q", got)
	}
}
