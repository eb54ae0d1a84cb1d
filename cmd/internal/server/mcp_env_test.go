package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// mcpcounter builds the reference MCP server once per test binary
// (-trimpath, as make test builds: a fresh clone then links it from the
// build cache instead of compiling the MCP SDK again).
var mcpcounter = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "mcpcounter")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mcpcounter")
	out, err := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/idemgate/idemgate/internal/mcpcounter").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build mcpcounter: %v\n%s", err, out)
	}
	return bin, nil
})

func counterBinary(t testing.TB) string {
	t.Helper()
	bin, err := mcpcounter()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// mcpEnv is a gateway proxying mcpcounter as the MCP server "tickets",
// whose effects are counted in a file of the test's own.
type mcpEnv struct {
	*env
	effects string
}

// mcpServersTemplate is the proxy's configuration: the stdio server, its
// effects file and its tools' settings; %[3]s adds more servers.
const mcpServersTemplate = `mcp_servers:
  - name: tickets
    command: [%[1]s, -effects, %[2]s]
    timeout: 2s
    tools:
      create_ticket: {business_key: /source_event_id}
      deploy: {concurrency_key: /environment, approval: {when: 'args.environment == "production"', approvers: [admin], summary: 'Deploy {{.args.artifact}}'}}
      trace: {guard: true}
      slow_ticket: {concurrency_key: /title}
%[3]s`

func newMCPEnv(t *testing.T, db dbtest.DB, more string) *mcpEnv {
	effects := filepath.Join(t.TempDir(), "effects.jsonl")
	e := newEnv(t, db.Open(t), db.DSN, fmt.Sprintf(mcpServersTemplate, counterBinary(t), effects, more))
	t.Cleanup(e.g.Close) // stops the servers the proxy started
	return &mcpEnv{env: e, effects: effects}
}

// intentKey is the identity of the operation of an intent sent to the
// tickets server's tool by a principal of tenant.
func intentKey(tenant, tool, principal, intent string) ledger.OpKey {
	return ledger.OpKey{Tenant: tenant, Namespace: ledger.MCPNamespace("tickets"),
		Key: contract.MCPIntentKey(tool, principal, intent)}
}

// forEachMCPStore runs test on a proxy on a new store of each kind.
func forEachMCPStore(t *testing.T, test func(t *testing.T, e *mcpEnv)) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) { test(t, newMCPEnv(t, db, "")) })
}

// effectCount is how many effects the MCP server made: the lines of its
// effects file.
func (e *mcpEnv) effectCount() int {
	e.t.Helper()
	b, err := os.ReadFile(e.effects)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// bearer adds a token to every request of an MCP client.
type withToken struct{ token string }

func (b withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// session connects an MCP client, as the holder of token, to server.
func (e *mcpEnv) session(token, server string, opts *mcp.ClientOptions) *mcp.ClientSession {
	e.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, opts)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.gw.URL + contract.MCPPath + "/" + server,
		HTTPClient: &http.Client{Transport: withToken{token}}}, nil)
	if err != nil {
		e.t.Fatalf("connect to %s: %v", server, err)
	}
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

// callTool calls a tool, failing the test on a protocol error.
func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// codeOf is a refused call's problem code ("" for a result).
func codeOf(r *mcp.CallToolResult) string {
	c, _ := r.Meta[contract.MetaCode].(string)
	return c
}

// textOf is a result's text.
func textOf(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

// structured is a result's structured content as a map.
func structured(t *testing.T, r *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, _ := json.Marshal(r.StructuredContent)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("never: %s", what)
}
