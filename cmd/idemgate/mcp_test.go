package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/agent"
)

// agentFixture is a real gateway process in front of an upstream that
// counts the writes it performs, and the journal and environment the
// agent's processes (idemgate mcp, idemgate call) run with.
type agentFixture struct {
	gateway string
	journal string
	effects *atomic.Int64
	env     []string
}

// agentSecret is the agents' secret in these tests.
const agentSecret = "a-test-secret-of-more-than-sixteen-bytes"

// newAgentFixture starts the gateway. The upstream creates a ticket for
// /v1/tickets (201, counted), and answers /v1/missing with its own 404 and
// /v1/invalid with its own 422, performing nothing; /v1/broken performs
// the write (counted), then answers 500, so the operation is unknown.
func newAgentFixture(t *testing.T) *agentFixture {
	t.Helper()
	return newAgentFixtureWith(t, "")
}

// newAgentFixtureWith is newAgentFixture with settings added to the
// gateway's configuration.
func newAgentFixtureWith(t *testing.T, settings string) *agentFixture {
	t.Helper()
	f := &agentFixture{effects: new(atomic.Int64), journal: filepath.Join(t.TempDir(), "journal.db")}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/missing":
			w.WriteHeader(404)
			fmt.Fprint(w, `{"error":"no such project"}`)
		case "/v1/invalid":
			w.WriteHeader(422)
			fmt.Fprint(w, `{"error":"title is required"}`)
		case "/v1/broken": // performed, then the upstream fails: nobody knows
			f.effects.Add(1)
			w.WriteHeader(500)
		default:
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"id":"T-%d"}`, f.effects.Add(1))
		}
	}))
	t.Cleanup(up.Close)
	routes := "  - {match: POST /v1/tickets, upstream: app, lease: 30s}\n" +
		"  - {match: POST /v1/missing, upstream: app, lease: 30s}\n  - {match: POST /v1/invalid, upstream: app, lease: 30s}\n" +
		"  - {match: POST /v1/broken, upstream: app, lease: 30s}\n" + settings
	f.gateway = startGateway(t, writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "gw.db"), up.URL, routes)).URL
	f.env = []string{"IDEMGATE_TOKEN=agent-token", "IDEMGATE_URL=" + f.gateway, "IDEMGATE_JOURNAL=" + f.journal,
		"IDEMGATE_AGENT_SECRET=" + agentSecret}
	return f
}

// mcp starts idemgate mcp as a real process, as an MCP client would, and
// connects to it over its stdin and stdout.
func (f *agentFixture) mcp(t *testing.T, env ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(child, "mcp")
	cmd.Env = childEnv(append(append([]string{}, f.env...), env...)...)
	cmd.Stderr = os.Stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-model", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// toolResult is a tool's answer: its structured content as JSON members,
// and whether it is an error result.
type toolResult struct {
	out     map[string]any
	isError bool
	text    string
}

func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) toolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	r := toolResult{isError: res.IsError}
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			r.text = tc.Text
		}
	}
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &r.out); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// handOut asks submit_write for an intent for the write, as a model's
// first call does: nothing is sent.
func handOut(t *testing.T, cs *mcp.ClientSession, write map[string]any) string {
	t.Helper()
	r := callTool(t, cs, "submit_write", write)
	intent, _ := r.out["intent"].(string)
	if r.isError || r.out["kind"] != "intent_created" || intent == "" {
		t.Fatalf("handing out an intent: %+v", r)
	}
	return intent
}

// withIntent is write with the intent the tool handed out.
func withIntent(write map[string]any, intent string) map[string]any {
	w := map[string]any{"intent": intent}
	for k, v := range write {
		w[k] = v
	}
	return w
}

// idemgate mcp, as a strict client sees it: its real version, read-only
// tools marked so, a result that did not perform the write (the API's own
// 404 and 422) an error result that keeps its kind and next step, no
// empty approval, and operation_status saying the operation's state, not
// "replayed".
func TestMCPResultsSayWhatTheyDid(t *testing.T) {
	t.Parallel()
	f := newAgentFixture(t)
	cs := f.mcp(t)
	if v := cs.InitializeResult().ServerInfo.Version; v != buildVersion() || v == "dev" || v == "" {
		t.Errorf("server version %q, want the build's (%q)", v, buildVersion())
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		readOnly := tool.Annotations != nil && tool.Annotations.ReadOnlyHint
		if want := tool.Name != "submit_write"; readOnly != want {
			t.Errorf("%s: readOnlyHint %v, want %v", tool.Name, readOnly, want)
		}
	}
	for path, code := range map[string]float64{"/v1/missing": 404, "/v1/invalid": 422} {
		write := map[string]any{"method": "POST", "path": path, "body": map[string]any{"title": "x"}}
		r := callTool(t, cs, "submit_write", withIntent(write, handOut(t, cs, write)))
		if !r.isError || r.out["kind"] != "rejected" || r.out["status"] != code || r.out["next_step"] == "" {
			t.Errorf("%s: want an error result keeping kind and next_step, got %+v", path, r)
		}
		if _, ok := r.out["approval"]; ok {
			t.Errorf("%s: an approval where none is involved: %+v", path, r.out)
		}
	}
	write := map[string]any{"method": "POST", "path": "/v1/tickets", "body": map[string]any{"title": "Disk full"}}
	intent := handOut(t, cs, write)
	for _, want := range []string{"created", "replayed"} {
		if r := callTool(t, cs, "submit_write", withIntent(write, intent)); r.isError || r.out["kind"] != want {
			t.Fatalf("want %s: %+v", want, r)
		}
	}
	st := callTool(t, cs, "operation_status", map[string]any{"intent": intent})
	if st.isError || st.out["kind"] != "succeeded" || st.out["state"] != "succeeded" ||
		!strings.Contains(fmt.Sprint(st.out["next_step"]), "Done") {
		t.Errorf("status of a done write: %+v", st)
	}
	if _, ok := st.out["approval"]; ok {
		t.Errorf("status: an approval where none is involved: %+v", st.out)
	}
	if n := f.effects.Load(); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// The version a binary reports comes from its build: what the build set
// (make build), the module's version (go install MODULE@VERSION), the
// commit, or Go's own "(devel)"; never a placeholder.
func TestVersionComesFromTheBuild(t *testing.T) {
	t.Parallel()
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	for _, c := range []struct {
		set  string
		info *debug.BuildInfo
		want string
	}{
		{"v1.4.0", &debug.BuildInfo{Main: debug.Module{Version: "v9.9.9"}}, "v1.4.0"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.1"}}, "v1.4.1"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "devel-0123456789ab+dirty"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{"", nil, "(devel)"},
	} {
		if got := versionOf(c.set, c.info); got != c.want {
			t.Errorf("versionOf(%q, %+v) = %q, want %q", c.set, c.info, got, c.want)
		}
	}
}

// refused checks a submit_write was refused as a tool error saying why,
// and that nothing reached the API.
func (f *agentFixture) refused(t *testing.T, cs *mcp.ClientSession, args map[string]any, why string, effects int64) {
	t.Helper()
	r := callTool(t, cs, "submit_write", args)
	if !r.isError || !strings.Contains(r.text, why) || !strings.Contains(r.text, "nothing was sent") {
		t.Errorf("%v: want a refusal saying %q, got %+v", args, why, r)
	}
	if n := f.effects.Load(); n != effects {
		t.Fatalf("%v: %d effects, want %d", args, n, effects)
	}
}

// The model cannot make a second effect by naming intents itself: a name
// submit_write never handed out (invented, or a repeat "#2" typed by hand,
// or a handed-out name with its seal changed) is refused, and nothing is
// sent; a new intent (a handed-out name the journal does not hold, or a
// revise) whose request is that of an intent still open (unknown) is
// refused, naming it and its next step. (A name the journal holds is
// taken without its seal: it is that intent, and resuming it is safe.)
func TestMCPRefusesIntentsItNeverHandedOut(t *testing.T) {
	t.Parallel()
	f := newAgentFixture(t)
	cs := f.mcp(t)
	ticket := map[string]any{"method": "POST", "path": "/v1/tickets", "body": map[string]any{"title": "Disk full"}}
	f.refused(t, cs, withIntent(ticket, "task-9/create-ticket"), "never handed out", 0)
	intent := handOut(t, cs, ticket)
	if r := callTool(t, cs, "submit_write", withIntent(ticket, intent)); r.out["kind"] != "created" {
		t.Fatalf("a handed-out intent: %+v", r)
	}
	name, seal, _ := strings.Cut(intent, "~")
	for _, forged := range []string{intent + "#2", name + "#2", name + "~" + strings.Repeat("A", len(seal))} {
		f.refused(t, cs, withIntent(ticket, forged), "never handed out", 1)
	}

	charge := map[string]any{"method": "POST", "path": "/v1/broken", "body": map[string]any{"amount": 4999}}
	open := handOut(t, cs, charge)
	if r := callTool(t, cs, "submit_write", withIntent(charge, open)); r.out["kind"] != "unknown" {
		t.Fatalf("the charge: %+v", r)
	}
	keys, err := agent.NewKeys([]byte(agentSecret), "")
	if err != nil {
		t.Fatal(err)
	}
	f.refused(t, cs, withIntent(charge, keys.Seal("intent-fresh")), open, 2)
	revise := withIntent(charge, intent)
	revise["mode"] = "revise"
	f.refused(t, cs, revise, open, 2)
	r := callTool(t, cs, "submit_write", revise)
	if !strings.Contains(r.text, "operation_status") {
		t.Errorf("the refusal names no next step: %s", r.text)
	}
}
