package config

import (
	"strings"
	"testing"
	"time"
)

const mcpBase = `store: sqlite:/tmp/x.db
principals:
  - {name: agent, tenant: acme, roles: [agent], token_sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
mcp_servers:
`

// TestMCPServersConfig: a configuration of MCP servers alone is a
// gateway's; each tool's policies are read, the approval compiled, and
// the defaults filled.
func TestMCPServersConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_MCP_TOKEN", "s3cret")
	cfg, err := Parse("gw.yaml", []byte(mcpBase+`  - name: tickets
    command: [node, tickets-server.js]
    tools:
      create_ticket: {business_key: /source_event_id, retention: 24h}
      deploy: {approval: {when: 'args.environment == "production"', ttl: 15m, summary: 'Deploy {{.args.artifact}}'}}
      search_tickets: {guard: false}
  - name: remote
    url: https://mcp.example.com/mcp
    headers: {Authorization: "Bearer ${IDEMGATE_TEST_MCP_TOKEN}"}
    timeout: 5s
`))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.MCPServer("tickets")
	if s == nil || s.Timeout != 30*time.Second || s.Tools["deploy"].Policy == nil || *s.Tools["search_tickets"].Guard ||
		s.Tools["create_ticket"].BusinessKey != "/source_event_id" {
		t.Fatalf("tickets: %+v", s)
	}
	if r := cfg.MCPServer("remote"); r.Headers["Authorization"] != "Bearer s3cret" || r.Timeout != 5*time.Second {
		t.Fatalf("remote: %+v", r)
	}
}

// TestMCPServersConfigErrors: every mistake is refused at start-up, at
// its line.
func TestMCPServersConfigErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"  - {name: Tickets, command: [x]}\n", "gw.yaml:5: mcp server \"Tickets\": want a name"},
		{"  - {name: t}\n", "gw.yaml:5: mcp server t: give either command"},
		{"  - {name: t, command: [x], url: http://h/mcp}\n", "gw.yaml:5: mcp server t: give either command"},
		{"  - {name: t, url: ftp://h/mcp}\n", "gw.yaml:5: mcp server t: url"},
		{"  - {name: t, command: [x], headers: {A: b}}\n", "gw.yaml:5: mcp server t: headers go with url"},
		{"  - {name: t, url: http://h/mcp, headers: {\"A b\": c}}\n", "gw.yaml:5: mcp server t: header name"},
		{"  - {name: t, command: [x], isolation: process}\n", "gw.yaml:5: mcp server t: isolation \"process\""},
		{"  - {name: t, command: [x], tenants: [\"\"]}\n", "gw.yaml:5: mcp server t: an empty role or tenant"},
		{"  - name: t\n    command: [x]\n    tools:\n      a: {roles: [\"\"]}\n", "gw.yaml:8: mcp server t: tool a: an empty role"},
		{"  - {name: t, url: http://h/mcp, env: {A: b}}\n", "gw.yaml:5: mcp server t: env goes with command"},
		{"  - {name: t, command: [x], env: {\"A=B\": c}}\n", "gw.yaml:5: mcp server t: env \"A=B\""},
		{"  - {name: t, command: [x]}\n  - {name: t, command: [y]}\n", "gw.yaml:6: mcp server \"t\" is defined twice"},
		{"  - name: t\n    command: [x]\n    tools:\n      a: {guard: false, business_key: /id}\n",
			"gw.yaml:8: mcp server t: tool a: guard: false forwards it unrecorded"},
		{"  - name: t\n    command: [x]\n    tools:\n      a: {business_key: id}\n", "gw.yaml:8: mcp server t: tool a: JSON pointer"},
		{"  - name: t\n    command: [x]\n    tools:\n      a:\n        approval:\n          when: 'args.x =='\n",
			"gw.yaml:10: mcp server t: tool a: approval: when"},
		{"  - name: t\n    command: [x]\n    tools:\n      a:\n", "gw.yaml:8: mcp server t: tool a: empty"},
	} {
		_, err := Parse("gw.yaml", []byte(mcpBase+tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestMCPSessionsConfig: mcp_sessions has its defaults, takes its
// settings, and refuses a negative one or a principal's limit past the
// gateway's, at its line.
func TestMCPSessionsConfig(t *testing.T) {
	const server = "  - {name: t, command: [x]}\n"
	cfg, err := Parse("gw.yaml", []byte(mcpBase+server))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.MCPSessions; s != (MCPSessions{IdleTimeout: 30 * time.Minute, MaxPerPrincipal: 100, Max: 10000}) {
		t.Fatalf("defaults: %+v", s)
	}
	cfg, err = Parse("gw.yaml", []byte(mcpBase+server+"mcp_sessions: {idle_timeout: 5m, max: 8}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.MCPSessions; s != (MCPSessions{IdleTimeout: 5 * time.Minute, MaxPerPrincipal: 8, Max: 8}) {
		t.Fatalf("set: %+v", s)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"mcp_sessions: {idle_timeout: -1s}\n", "gw.yaml:6: mcp_sessions: idle_timeout, max_per_principal and max must be positive"},
		{"mcp_sessions: {max_per_principal: 20, max: 10}\n", "gw.yaml:6: mcp_sessions: max_per_principal (20) is more than max (10)"},
		{"mcp_sessions: {idle: 1m}\n", "idle"},
	} {
		if _, err := Parse("gw.yaml", []byte(mcpBase+server+tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
