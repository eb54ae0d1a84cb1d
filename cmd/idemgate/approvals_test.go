package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// approvalGateway is a real gateway, in this process, on a SQLite store:
// production deployments wait for an approver; agent requests them, alice
// decides.
type approvalGateway struct {
	url string
	up  *slowUpstream
}

func startApprovalGateway(t *testing.T) *approvalGateway {
	t.Helper()
	up := newSlowUpstream(t, 0)
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: sqlite:%s
sweep_interval: 100ms
shutdown_timeout: 5s
upstreams:
  app: {url: %s, timeout: 10s, forward_key: true}
principals:
  - {name: agent, tenant: acme, roles: [agent], token_sha256: %s}
  - {name: alice, tenant: acme, roles: [approver], token_sha256: %s}
routes:
  - match: "POST /v1/services/{service}/deployments"
    upstream: app
    approval:
      when: 'body.environment == "production"'
      approvers: [approver]
      summary: 'Deploy {{.body.artifact}} to {{.body.environment}} ({{.params.service}})'
      reversible: false
`, filepath.Join(t.TempDir(), "gw.db"), up.srv.URL, hashOf("agent-token"), hashOf("alice-token"))
	cfg, err := config.Parse("gw.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serveInProcess(t, cfg)
	t.Cleanup(func() { _ = stop() })
	return &approvalGateway{url: "http://" + addr, up: up}
}

// deploy is the agent's request for a production deployment of artifact
// under key: its status, and its 202 body when it waits.
func (g *approvalGateway) deploy(t *testing.T, key, artifact string) (int, contract.Accepted) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"artifact": artifact, "environment": "production", "replicas": 3})
	req, _ := http.NewRequest("POST", g.url+"/v1/services/api/deployments", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer agent-token")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a contract.Accepted
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusAccepted {
		if err := json.Unmarshal(b, &a); err != nil || a.Approval.ID == "" {
			t.Fatalf("202 without an approval: %v %s", err, b)
		}
	}
	return resp.StatusCode, a
}

// as runs idemgate approvals ARGS with the token of who.
func (g *approvalGateway) as(t *testing.T, who string, args ...string) result {
	t.Helper()
	env := []string{"IDEMGATE_URL=" + g.url, "IDEMGATE_TOKEN=" + who + "-token"}
	return runEnv(t, env, "", append([]string{"approvals"}, args...)...)
}

// approval reads an approval's view, as alice.
func (g *approvalGateway) approval(t *testing.T, id string) contract.ApprovalView {
	t.Helper()
	r := g.as(t, "alice", "show", id, "--json")
	var v contract.ApprovalView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
		t.Fatalf("show --json: %v %+v", err, r)
	}
	return v
}

// fifteenMinutes is the time left of a fresh approval: ttl 15m by default.
var fifteenMinutes = regexp.MustCompile(`(14m[0-5][0-9]s|15m00s)`)

// TestApprovalsListShowApprove: what alice sees, and a decision with the
// right fingerprint lets the agent's retry run, once; none other does.
func TestApprovalsListShowApprove(t *testing.T) {
	t.Parallel()
	g := startApprovalGateway(t)
	status, acc := g.deploy(t, "deploy-1", "api:1.4.2")
	if status != 202 {
		t.Fatalf("deploy: %d", status)
	}
	id := acc.Approval.ID
	r := g.as(t, "alice", "list")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ID") || !strings.Contains(r.stdout, id) ||
		!strings.Contains(r.stdout, acc.OperationID) || !strings.Contains(r.stdout, "POST /v1/services/api/deployments") ||
		!strings.Contains(r.stdout, "pending") || !fifteenMinutes.MatchString(r.stdout) || !strings.Contains(r.stdout, "agent") {
		t.Fatalf("list: %+v", r)
	}
	r = g.as(t, "alice", "list", "--json", "--all-pages")
	var lv contract.ApprovalListView
	if err := json.Unmarshal([]byte(r.stdout), &lv); err != nil || len(lv.Approvals) != 1 || lv.Approvals[0].ID != id {
		t.Fatalf("list --json: %v %+v", err, r)
	}
	fp := lv.Approvals[0].Fingerprint
	r = g.as(t, "alice", "show", id)
	for _, want := range []string{"target:       POST /v1/services/api/deployments",
		"summary:      Deploy api:1.4.2 to production (api)", "NOT reversible", "fingerprint:  " + fp,
		`    "artifact": "api:1.4.2",`, `    "replicas": 3`, "requested by: agent", "status:       pending",
		acc.OperationID + " (key deploy-1)"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q: %+v", want, r)
		}
	}
	if !regexp.MustCompile(`time left: +` + fifteenMinutes.String() + ` \(expires 20`).MatchString(r.stdout) {
		t.Errorf("show lacks the time left: %s", r.stdout)
	}
	testRefusedDecisions(t, g, id, fp)
	if n := g.up.effects.Load(); n != 0 {
		t.Fatalf("%d effects before the approval", n)
	}
	r = g.as(t, "alice", "approve", id, "--fingerprint", fp, "--note", "change CHG-7")
	want := fmt.Sprintf("approved %s (operation %s, POST /v1/services/api/deployments) by alice\n", id, acc.OperationID)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("approve: %+v, want %q", r, want)
	}
	if status, _ := g.deploy(t, "deploy-1", "api:1.4.2"); status != 201 || g.up.effects.Load() != 1 {
		t.Fatalf("retry after the approval: %d, %d effects", status, g.up.effects.Load())
	}
	r = g.as(t, "alice", "approve", id, "--fingerprint", fp)
	if r.code != 1 || !strings.Contains(r.stderr, "approve "+id+": approval_closed: ") {
		t.Fatalf("approve a used approval: %+v", r)
	}
	if v := g.approval(t, id); v.Status != ledger.ApprovalUsed || v.Note != "change CHG-7" || v.DecidedBy != "alice" {
		t.Fatalf("after use: %+v", v)
	}
}

// testRefusedDecisions: a wrong fingerprint, no fingerprint without a
// terminal, the requester, an unknown id: each refused, nothing decided.
func testRefusedDecisions(t *testing.T, g *approvalGateway, id, fp string) {
	t.Helper()
	r := g.as(t, "alice", "approve", id, "--fingerprint", "sha256:"+strings.Repeat("0", 64))
	if r.code != 1 || !strings.Contains(r.stderr, "approve "+id+": approval_mismatch: ") || r.stdout != "" {
		t.Errorf("wrong fingerprint: %+v", r)
	}
	r = g.as(t, "alice", "approve", id)
	if r.code != 1 || !strings.Contains(r.stderr, "pass --fingerprint (copy it from `idemgate approvals show "+id+"`)") ||
		!strings.Contains(r.stderr, fp) || r.stdout != "" {
		t.Errorf("no fingerprint, no terminal: %+v", r)
	}
	r = g.as(t, "agent", "approve", id, "--fingerprint", fp)
	if r.code != 1 || !strings.Contains(r.stderr, "approve "+id+": forbidden: ") {
		t.Errorf("the agent approves: %+v", r)
	}
	r = g.as(t, "alice", "show", "apr_nope")
	if r.code != 1 || !strings.Contains(r.stderr, "show apr_nope: not_found: no such approval (in your tenant)") {
		t.Errorf("unknown id: %+v", r)
	}
	if v := g.approval(t, id); v.Status != ledger.ApprovalPending || v.DecidedBy != "" {
		t.Fatalf("after the refusals: %+v", v)
	}
}

// TestApprovalsDeny: a denial fails the operation; the agent's retry gets
// 403 and nothing reaches the upstream.
func TestApprovalsDeny(t *testing.T) {
	t.Parallel()
	g := startApprovalGateway(t)
	_, acc := g.deploy(t, "deploy-2", "api:2.0.0")
	fp := g.approval(t, acc.Approval.ID).Fingerprint
	r := g.as(t, "alice", "deny", acc.Approval.ID, "--fingerprint", fp, "--note", "not during the freeze", "--json")
	var v contract.ApprovalView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 || v.Status != ledger.ApprovalDenied ||
		v.DecidedBy != "alice" || v.Note != "not during the freeze" {
		t.Fatalf("deny --json: %v %+v", err, r)
	}
	if status, _ := g.deploy(t, "deploy-2", "api:2.0.0"); status != 403 || g.up.effects.Load() != 0 {
		t.Fatalf("retry after the denial: %d, %d effects", status, g.up.effects.Load())
	}
	r = g.as(t, "alice", "show", acc.Approval.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "decided by:   alice") ||
		!strings.Contains(r.stdout, "note:         not during the freeze") || strings.Contains(r.stdout, "time left") {
		t.Fatalf("show a denied approval: %+v", r)
	}
	if r := g.as(t, "alice", "list"); r.code != 0 || strings.Contains(r.stdout, acc.Approval.ID) {
		t.Fatalf("list shows a denied approval as pending: %+v", r)
	}
	if r := g.as(t, "alice", "list", "--status", "denied"); r.code != 0 || !strings.Contains(r.stdout, acc.Approval.ID) {
		t.Fatalf("list --status denied: %+v", r)
	}
}

// TestApprovalsHostileSummary: control characters from a request body
// reach the screen escaped, never as a sequence the terminal obeys.
func TestApprovalsHostileSummary(t *testing.T) {
	t.Parallel()
	g := startApprovalGateway(t)
	_, acc := g.deploy(t, "deploy-3", "api:3\x1b[2J\rapproved by security\u202e")
	for _, args := range [][]string{{"show", acc.Approval.ID}, {"list"}} {
		r := g.as(t, "alice", args...)
		if r.code != 0 || strings.ContainsAny(r.stdout, "\x1b\r\u202e") || !strings.Contains(r.stdout, `api:3\x1b[2J\r`) {
			t.Errorf("%v: %q", args, r.stdout)
		}
	}
	if r := g.as(t, "alice", "show", acc.Approval.ID); !strings.Contains(r.stdout, `security\u202e to production (api)`) ||
		!strings.Contains(r.stdout, `"artifact": "api:3\u001b[2J\rapproved by security\u202e",`) {
		t.Errorf("show: %q", r.stdout)
	}
}

// TestApprovalsConfirmAtTerminal: without --fingerprint, at a terminal,
// only the fingerprint's first 12 hex digits typed back send the decision.
// Each decision is an idemgate process of its own, its stdin a
// pseudo-terminal where the answer is typed, its token in its environment.
func TestApprovalsConfirmAtTerminal(t *testing.T) {
	t.Parallel()
	g := startApprovalGateway(t)
	_, acc := g.deploy(t, "deploy-4", "api:4.0.0")
	id := acc.Approval.ID
	fp := g.approval(t, id).Fingerprint
	run := func(answer string, args ...string) result {
		keyboard, tty := openPTY(t)
		if _, err := keyboard.WriteString(answer); err != nil {
			t.Fatal(err)
		}
		return runIn(t, []string{"IDEMGATE_TOKEN=alice-token"}, tty, append([]string{"approvals", "--gateway", g.url}, args...)...)
	}
	r := run("sha256:"+fp[7:19]+"\n", "approve", id)
	if r.code == 0 || !strings.Contains(r.stderr, "nothing was sent") || r.stdout != "" ||
		!strings.Contains(r.stderr, "Approve Deploy api:4.0.0 to production (api)? Type the first 12 hex digits of the fingerprint to confirm: ") ||
		!strings.Contains(r.stderr, "NOT reversible") || g.approval(t, id).Status != ledger.ApprovalPending {
		t.Fatalf("a wrong answer: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = run(fp[7:19]+"\n", "deny", id); r.code != 0 || !strings.Contains(r.stderr, "fingerprint to deny: ") {
		t.Fatalf("deny confirmed: exit %d %q", r.code, r.stderr)
	}
	if v := g.approval(t, id); v.Status != ledger.ApprovalDenied {
		t.Fatalf("after the confirmed denial: %+v", v)
	}
}

// TestApprovalsNeedGatewayAndToken: both come from the environment, and
// their absence is said plainly.
func TestApprovalsNeedGatewayAndToken(t *testing.T) {
	t.Parallel()
	r := runEnv(t, []string{"IDEMGATE_URL=", "IDEMGATE_TOKEN=x"}, "", "approvals", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "no gateway: pass --gateway or set IDEMGATE_URL") {
		t.Errorf("no gateway: %+v", r)
	}
	r = runEnv(t, []string{"IDEMGATE_URL=http://127.0.0.1:1", "IDEMGATE_TOKEN="}, "", "approvals", "show", "apr_1")
	if r.code != 1 || !strings.Contains(r.stderr, "no token: set IDEMGATE_TOKEN") {
		t.Errorf("no token: %+v", r)
	}
	if r := runEnv(t, []string{"IDEMGATE_URL=http://127.0.0.1:1", "IDEMGATE_TOKEN=x"}, "", "approvals", "list",
		"--status", "waiting"); r.code != 1 || !strings.Contains(r.stderr, "unknown approval status") {
		t.Errorf("bad status: %+v", r)
	}
}

// TestApprovalsPrintNoControlCharacters: an answer that is no problem (a
// proxy's error page, or a hostile one) never reaches the terminal raw:
// no escape sequence, bell or carriage return is printed.
func TestApprovalsPrintNoControlCharacters(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte("\x1b[2J\x1b]0;pwned\x07 bad gateway\r approved"))
	}))
	defer srv.Close()
	for _, args := range [][]string{{"approvals", "show", "apr_1"}, {"approvals", "list"},
		{"approvals", "approve", "apr_1", "--fingerprint", "sha256:" + strings.Repeat("a", 64)}} {
		r := runEnv(t, []string{"IDEMGATE_TOKEN=t", "IDEMGATE_URL=" + srv.URL}, "", args...)
		if r.code != 1 || strings.ContainsAny(r.stderr, "\x1b\x07\r") || !strings.Contains(r.stderr, "answered 502") {
			t.Errorf("%v: %d %q", args, r.code, r.stderr)
		}
	}
}
