package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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
	"github.com/idemgate/idemgate/inbox/webhook"
	"github.com/idemgate/idemgate/internal/surfacetest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// webhookSurface: a signed delivery (Standard Webhooks) on a webhook
// route of the tenant's, its key the signed webhook-id.
type webhookSurface struct{ *suiteGateway }

func (s *webhookSurface) Name() string { return "webhook" }

func (s *webhookSurface) Store() ledger.Store { return s.store }

func (s *webhookSurface) path(c surfacetest.Call) string {
	return "/hooks/" + c.Tenant + "/" + map[surfacetest.Upstream]string{surfacetest.Answers: "ok",
		surfacetest.LosesAnswer: "lost", surfacetest.Breakable: "flaky", surfacetest.NeedsApproval: "approve"}[c.Upstream]
}

func (s *webhookSurface) Send(t testing.TB, c surfacetest.Call) surfacetest.Answer {
	body := command(c)
	signed, err := webhook.Sign(webhook.Standard, standardSecret, c.Key, time.Now(), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	h := []string{"Content-Type", "application/json"}
	for k := range signed {
		h = append(h, k, signed.Get(k))
	}
	r := s.doAs(t, "POST", s.path(c), "", body, h...)
	return surfacetest.Answer{Outcome: outcomeOf(r), Body: []byte(r.body), OpID: r.header.Get(contract.HeaderOperation)}
}

func (s *webhookSurface) Effects(_ testing.TB, marker string) int { return s.counter.count(marker) }

func (s *webhookSurface) Key(c surfacetest.Call) ledger.OpKey {
	return ledger.OpKey{Tenant: c.Tenant, Namespace: ledger.WebhookNamespace(s.path(c)), Key: c.Key}
}

func (s *webhookSurface) Skips() map[string]string { return nil }

func (s *webhookSurface) Down(t testing.TB) { s.flaky.Down(t) }

func (s *webhookSurface) Up(t testing.TB) { s.flaky.Up(t) }

// actionSurface: an action the caller performs itself under the lease the
// reservation hands it, then completes; its effects are the caller's,
// counted here. Its Breakable upstream is the caller's own, which it
// cannot reach while down: it releases the lease.
type actionSurface struct {
	*suiteGateway
	effects *markerCounter
	mu      sync.Mutex
	down    bool
}

func (s *actionSurface) Name() string { return "action" }

func (s *actionSurface) Store() ledger.Store { return s.store }

func (s *actionSurface) Send(t testing.TB, c surfacetest.Call) surfacetest.Answer {
	name := "suite.send"
	switch c.Upstream {
	case surfacetest.LosesAnswer:
		name = "suite.short" // its caller dies: the lease lapses soon
	case surfacetest.NeedsApproval:
		name = "suite.approve"
	}
	token := tokens[c.Tenant]
	r := s.doAs(t, "POST", "/_idem/v1/actions/"+name, token, command(c), "Idempotency-Key", c.Key)
	var g grant
	_ = json.Unmarshal([]byte(r.body), &g)
	switch {
	case r.status == 200 && r.header.Get(contract.HeaderReplayed) == "true":
		return surfacetest.Answer{Outcome: surfacetest.Replayed, Body: g.Result, OpID: g.Operation.ID}
	case r.status != 201:
		a := surfacetest.Answer{Outcome: outcomeOf(r), Body: []byte(r.body)}
		return a
	}
	return s.own(t, c, token, g)
}

// own performs the effect under the lease g hands over, as the caller.
func (s *actionSurface) own(t testing.TB, c surfacetest.Call, token string, g grant) surfacetest.Answer {
	id := g.Operation.ID
	s.mu.Lock()
	down := s.down && c.Upstream == surfacetest.Breakable
	s.mu.Unlock()
	if down {
		r := s.doAs(t, "POST", "/_idem/v1/operations/"+id+"/release", token, owner(g.Lease, `"reason":"unreachable"`))
		if r.status != 200 {
			t.Errorf("release: %d %s", r.status, r.body)
		}
		return surfacetest.Answer{Outcome: surfacetest.Released, OpID: id}
	}
	n := s.effects.add(c.Marker)
	if c.Upstream == surfacetest.LosesAnswer {
		// The caller dies after its effect: the lease lapses, the sweep
		// makes the operation unknown.
		eventually(t.(*testing.T), "the lapsed action unknown", func() bool {
			op, err := s.store.Get(context.Background(), id)
			return err == nil && op.State == ledger.Unknown
		})
		return surfacetest.Answer{Outcome: surfacetest.Unknown, OpID: id}
	}
	result := fmt.Sprintf(`{"case":%q,"n":%d}`, c.Marker, n)
	r := s.doAs(t, "POST", "/_idem/v1/operations/"+id+"/complete", token, owner(g.Lease, `"state":"succeeded","result":`+result))
	if r.status != 200 {
		t.Errorf("complete: %d %s", r.status, r.body)
	}
	// The caller's answer is the result it recorded (the complete's reply
	// does not repeat it).
	return surfacetest.Answer{Outcome: surfacetest.Executed, Body: []byte(result), OpID: id}
}

func (s *actionSurface) Effects(_ testing.TB, marker string) int { return s.effects.count(marker) }

func (s *actionSurface) Key(c surfacetest.Call) ledger.OpKey {
	return ledger.OpKey{Tenant: c.Tenant, Namespace: ledger.NamespaceClients, Key: c.Key}
}

func (s *actionSurface) Skips() map[string]string { return nil }

func (s *actionSurface) Down(testing.TB) { s.setDown(true) }

func (s *actionSurface) Up(testing.TB) { s.setDown(false) }

func (s *actionSurface) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// mcpSurface: a tools/call through the MCP proxy to a Streamable HTTP
// mcpcounter, the intent the call's key. The tool die makes its effect
// and exits before answering: a lost answer.
type mcpSurface struct {
	*suiteGateway
	mu       sync.Mutex
	sessions map[string]*mcp.ClientSession
}

func (s *mcpSurface) Name() string { return "mcp" }

func (s *mcpSurface) Store() ledger.Store { return s.store }

func (s *mcpSurface) session(t testing.TB, tenant string) *mcp.ClientSession {
	return s.sessionOf(t, tokens[tenant])
}

// sessionOf is the session of the holder of token, opened once.
func (s *mcpSurface) sessionOf(t testing.TB, token string) *mcp.ClientSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions == nil {
		s.sessions = map[string]*mcp.ClientSession{}
	}
	if cs := s.sessions[token]; cs != nil {
		return cs
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "suite", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.gw.URL + contract.MCPPath + "/suite",
		HTTPClient: &http.Client{Transport: withToken{token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.env.t.Cleanup(func() { _ = cs.Close() })
	s.sessions[token] = cs
	return cs
}

func (s *mcpSurface) tool(c surfacetest.Call) string {
	switch c.Upstream {
	case surfacetest.LosesAnswer:
		return "die"
	case surfacetest.NeedsApproval:
		return "deploy" // its policy holds a production deploy
	}
	return "create_ticket"
}

func (s *mcpSurface) Send(t testing.TB, c surfacetest.Call) surfacetest.Answer {
	args := map[string]any{"intent": c.Key, "title": c.Marker + "/" + c.Variant}
	if c.Oversize {
		args["title"] = c.Marker + "/" + strings.Repeat("p", contract.DefaultMaxBody)
	}
	if c.Upstream == surfacetest.NeedsApproval {
		args = map[string]any{"intent": c.Key, "environment": "production", "artifact": c.Marker + "/" + c.Variant}
	}
	res, err := s.session(t, c.Tenant).CallTool(context.Background(), &mcp.CallToolParams{Name: s.tool(c), Arguments: args})
	if c.Upstream == surfacetest.LosesAnswer && s.mcp.ensureUp(t) {
		s.fresh(t)
	}
	if err != nil {
		return surfacetest.Answer{Outcome: surfacetest.Other, Body: []byte(err.Error())}
	}
	body, _ := json.Marshal([]any{res.Content, res.StructuredContent})
	a := surfacetest.Answer{Body: body}
	a.OpID, _ = res.Meta[contract.MetaOperation].(string)
	switch code := codeOf(res); {
	case !res.IsError && res.Meta[contract.MetaReplayed] == true:
		a.Outcome = surfacetest.Replayed
	case !res.IsError:
		a.Outcome = surfacetest.Executed
	case code == contract.CodeFingerprintMismatch:
		a.Outcome = surfacetest.Refused
	case code == contract.CodeOutcomeUnknown:
		a.Outcome = surfacetest.Unknown
	case code == contract.CodeUpstreamUnavailable:
		a.Outcome = surfacetest.Released
	case code == contract.CodeInProgress:
		a.Outcome = surfacetest.InProgress
	case code == contract.CodeApprovalRequired:
		a.Outcome = surfacetest.Pending
	case code == contract.CodePayloadTooLarge,
		// The proxy refuses arguments over 1 MiB while reading them, as
		// invalid JSON ("document too large"), not as payload_too_large.
		code == contract.CodeInvalidCommand && strings.Contains(textOf(res), "document too large"):
		a.Outcome = surfacetest.TooLarge
	default:
		a.Outcome, a.Body = surfacetest.Other, []byte(code+": "+textOf(res))
	}
	return a
}

func (s *mcpSurface) Effects(t testing.TB, marker string) int { return s.mcp.effectsOf(t, marker) }

func (s *mcpSurface) Key(c surfacetest.Call) ledger.OpKey {
	principal := map[string]string{surfacetest.TenantA: "agent", surfacetest.TenantB: "other"}[c.Tenant]
	return ledger.OpKey{Tenant: c.Tenant, Namespace: ledger.MCPNamespace("suite"),
		Key: contract.MCPIntentKey(s.tool(c), principal, c.Key)}
}

func (s *mcpSurface) Skips() map[string]string { return nil }

// Down stops the MCP server: its port refuses connections.
func (s *mcpSurface) Down(t testing.TB) { s.mcp.stop(t) }

// Up starts it again at its address: a new process, which knows nothing
// of the proxy's session (404 session not found). The suite's retry
// meets that session: Up leaves it to the retry.
func (s *mcpSurface) Up(t testing.TB) { s.mcp.start(t) }

// fresh waits until the proxy has a session with the server started
// anew: the read-only count_effects, forwarded unrecorded, meets the old
// session (404, not sent), which the proxy then drops for a new one.
func (s *mcpSurface) fresh(t testing.TB) {
	testenv.WaitFor(t, "the proxy's new session", func() bool {
		res, err := s.sessionOf(t, "agent-token").CallTool(context.Background(),
			&mcp.CallToolParams{Name: "count_effects", Arguments: map[string]any{}})
		return err == nil && !res.IsError
	})
}

// restartableCounter is mcpcounter over Streamable HTTP, at one address
// across restarts, its effects in one file.
type restartableCounter struct {
	mu      sync.Mutex
	addr    string
	effects string
	cmd     *exec.Cmd
	exited  chan struct{}
	flags   []string // mcpcounter's extra flags (-readonly)
}

func newRestartableCounter(t *testing.T) *restartableCounter {
	c := &restartableCounter{addr: "127.0.0.1:0", effects: filepath.Join(t.TempDir(), "effects.jsonl")}
	c.start(t)
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *restartableCounter) config() string {
	return fmt.Sprintf(`mcp_servers:
  - name: suite
    url: 'http://%s/mcp'
    timeout: 3s
    headers: {Authorization: 'Bearer suite-secret'}
    tools:
      big: {max_result: 1KiB}
      deploy: {approval: {when: 'args.environment == "production"', approvers: [admin], summary: 'Deploy'}}
`, c.addr)
}

// start runs the server at c.addr (the first time, at a port of its own).
func (c *restartableCounter) start(t testing.TB) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for range 50 { // the port a stopped server held may take a moment to free
		if err = c.startLocked(t); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal(err)
}

func (c *restartableCounter) startLocked(t testing.TB) error {
	cmd := exec.Command(counterBinary(t), append([]string{"-effects", c.effects, "-http", c.addr, "-token", "suite-secret"},
		c.flags...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("mcpcounter -http %s: %q %v", c.addr, line, err)
	}
	c.addr, c.cmd, c.exited = addr, cmd, exited
	return nil
}

// restartWith stops the server and starts it again with flags.
func (c *restartableCounter) restartWith(t testing.TB, flags ...string) {
	c.stop(t)
	c.mu.Lock()
	c.flags = flags
	c.mu.Unlock()
	c.start(t)
}

// stop kills the server and waits for it to be gone.
func (c *restartableCounter) stop(testing.TB) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// ensureUp starts the server again if it died (the tool die): its port
// refuses connections once the process is gone. It reports whether it
// did.
func (c *restartableCounter) ensureUp(t testing.TB) bool {
	c.mu.Lock()
	conn, err := net.Dial("tcp", c.addr)
	c.mu.Unlock()
	if err == nil {
		conn.Close()
		return false
	}
	c.mu.Lock()
	<-c.exited
	c.mu.Unlock()
	c.start(t)
	return true
}

// effectsOf counts the server's effects whose title carries marker.
func (c *restartableCounter) effectsOf(t testing.TB, marker string) int {
	b, err := os.ReadFile(c.effects)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), `"`+marker+`/`) // a title or an artifact
}
