package server_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// mcpSDK returns node and the directory where the MCP TypeScript SDK and
// the Inspector are installed (make test's .ci/setup runs npm ci there). Without them
// the test skips, and under CI=true it fails.
func mcpSDK(t *testing.T) (node, dir string) {
	t.Helper()
	dir, _ = filepath.Abs(filepath.Join("testdata", "mcp"))
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	}
	if err != nil {
		msg := fmt.Sprintf("the MCP TypeScript SDK is not installed (node, and npm ci in %s): %v", dir, err)
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node, dir
}

// newTSEnv is a proxy whose server "ts" is the TypeScript SDK's upstream,
// counting its effects in its own file. Its timeout is a bound, not a
// window: the proxy waits up to it for node to start and list its tools
// (over 5 s on a loaded machine, which left the clients no tools), and
// no case here waits for a call to time out.
func newTSEnv(t *testing.T, db dbtest.DB) (*mcpEnv, string, string) {
	node, dir := mcpSDK(t)
	effects := filepath.Join(t.TempDir(), "ts-effects.jsonl")
	e := newMCPEnv(t, db, fmt.Sprintf("  - {name: ts, command: [%s, %s, %s], timeout: 2m}\n",
		node, filepath.Join(dir, "upstream.mjs"), effects))
	e.effects = effects
	return e, node, dir
}

// TestMCPTypeScriptClient: the official TypeScript SDK's client, through
// the proxy to an upstream written with the same SDK: one intent is one
// effect, replayed with its marks; changed arguments, a missing intent
// are refused; twenty concurrent copies of an intent are one effect. On
// SQLite alone, as TestMCPInspectorCLI: what they check is that these
// clients speak to the proxy, which no store changes; the surface suite
// (TestSurfaces) proves each guarantee on each store.
func TestMCPTypeScriptClient(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e, node, dir := newTSEnv(t, db)
	cmd := exec.Command(node, filepath.Join(dir, "client.mjs"), e.gw.URL+"/mcp/ts", "agent-token")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client.mjs: %v\n%s", err, stderrOf(err))
	}
	type seen struct {
		IsError    bool
		Meta       map[string]any
		Structured map[string]any
		Text       string
	}
	var got struct {
		IntentRequired                  bool
		Tools, Storm                    []string
		First, Again, Changed, NoIntent seen
		Count                           string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !got.IntentRequired || !slices.Contains(got.Tools, "operation_status") {
		t.Fatalf("the tools: %s", out)
	}
	if got.First.IsError || got.First.Structured["id"] != "T-1" || got.Again.Meta[contract.MetaReplayed] != true ||
		got.Again.Structured["id"] != "T-1" {
		t.Fatalf("an intent twice: %+v %+v", got.First, got.Again)
	}
	if got.Changed.Meta[contract.MetaCode] != contract.CodeFingerprintMismatch || !got.NoIntent.IsError {
		t.Fatalf("refusals: %+v %+v", got.Changed, got.NoIntent)
	}
	for _, s := range got.Storm {
		if s != "ok" && s != contract.CodeInProgress {
			t.Fatalf("the storm: %v", got.Storm)
		}
	}
	if got.Count != "2" || e.effectCount() != 2 {
		t.Fatalf("%s effects said, %d counted; want 2 (one per intent)", got.Count, e.effectCount())
	}
}

// TestMCPInspectorCLI: the MCP Inspector's CLI, through the proxy: it
// lists the tools, calls an intent twice (one effect, the second a
// replay), and is refused with a bad token. On SQLite alone (see
// TestMCPTypeScriptClient).
func TestMCPInspectorCLI(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e, node, dir := newTSEnv(t, db)
	inspect := func(token string, args ...string) ([]byte, error) {
		cmd := exec.Command(node, append([]string{filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector",
			"clients", "launcher", "build", "index.js"), "--cli", e.gw.URL + "/mcp/ts", "--transport", "http",
			"--header", "Authorization: Bearer " + token}, args...)...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "catalog.json"))
		return cmd.Output()
	}
	list, err := inspect("agent-token", "--method", "tools/list")
	if err != nil || !strings.Contains(string(list), `"intent"`) || !strings.Contains(string(list), "operation_status") {
		t.Fatalf("tools/list: %v %s %s", err, list, stderrOf(err))
	}
	call := []string{"--method", "tools/call", "--tool-name", "create_ticket", "--tool-arg", "intent=inspected", "title=x"}
	first, err := inspect("agent-token", call...)
	if err != nil || strings.Contains(string(first), contract.MetaReplayed) {
		t.Fatalf("the first call: %v %s %s", err, first, stderrOf(err))
	}
	again, err := inspect("agent-token", call...)
	if err != nil || !strings.Contains(string(again), contract.MetaReplayed) {
		t.Fatalf("the second call: %v %s %s", err, again, stderrOf(err))
	}
	if n := e.effectCount(); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if out, err := inspect("guess", "--method", "tools/list"); err == nil {
		t.Fatalf("a bad token listed the tools: %s", out)
	}
}

// stderrOf is what a failed command wrote on its standard error.
func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
