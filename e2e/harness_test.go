// Package e2e holds the drills: the gateway and the reference ops API as
// real processes on real sockets, faults injected, and each drill judged by
// the effects the API performed (GET /v1/effects) and the operation's final
// state, never by the HTTP answers alone.
package e2e

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/internal/together"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/sqlite"
)

// binary is idemgate, built once for all drills (or the one
// IDEMGATE_TEST_BINARY names: testenv.MainWithIdemgate).
var binary string

func TestMain(m *testing.M) {
	if journal := os.Getenv("IDEMGATE_E2E_AGENT"); journal != "" {
		os.Exit(runAgent(journal, os.Getenv("IDEMGATE_E2E_GATEWAY")))
	}
	os.Exit(testenv.MainWithIdemgate(m, &binary))
}

// startProc starts idemgate with args as a real process and waits for it
// to listen.
func startProc(t *testing.T, env []string, args ...string) *testenv.Process {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	return testenv.StartProcess(t, cmd)
}

// setup chooses what a drill runs.
type setup struct {
	// idempotentAPI runs opsapi in its default mode (its own httpidem
	// ledger) instead of --naive, and tells the gateway it honours keys.
	idempotentAPI bool
	// hold pauses the gateway between reservation and forwarding.
	hold time.Duration
	// apiLease is opsapi's lease in default mode.
	apiLease time.Duration
	// storeDir holds the gateway's SQLite file (default: the drill's own
	// directory), and storeQuery is added to its DSN (?min_free=0).
	storeDir, storeQuery string
	// storeDSN, if set, is the gateway's store instead (postgres://…).
	storeDSN string
	// ticketLease is the lease of POST /v1/tickets (default 1s).
	ticketLease string
	// upstreamTimeout is the gateway's timeout on the ops API (default
	// 2s): a drill that holds a write at the API (d.hold) past it sets
	// a bound instead, so that the gateway never gives up on its own.
	upstreamTimeout string
	// deployDuration is how long the API's rollouts take (default 2s).
	deployDuration time.Duration
	// config is added to the gateway's configuration.
	config string
	// approvalTTL, if set, makes production deployments wait for an
	// approver, pending at most this long (see approval_drills_test.go).
	approvalTTL string
	// audit turns the audit log on, with a key made in the drill's
	// directory, a checkpoint every checkpointEvery events (default 1000)
	// or 200ms, and a checkpoints file (see audit_drills_test.go).
	audit           bool
	checkpointEvery int
	// probeCaptures declares a reconciliation probe on captures (see
	// reconcile_drills_test.go): the intent looked up by id.
	probeCaptures bool
}

// drill is one gateway in front of one ops API with faults.
type drill struct {
	t       *testing.T
	setup   setup
	dir     string
	api     *testenv.Process
	gw      *testenv.Process
	config  string
	storeDB string
	apiDB   string
}

const (
	token         = "drill-agent-token"
	operatorToken = "drill-operator-token"
)

// The approvers: alice and bob may decide acme's approvals, carol is an
// agent who also holds the approver role, eve approves for another tenant.
var approvers = map[string]string{"alice": "drill-alice-token", "bob": "drill-bob-token",
	"carol": "drill-carol-token", "eve": "drill-eve-token"}

func newDrill(t *testing.T, s setup) *drill {
	dir := t.TempDir()
	storeDir := cmp.Or(s.storeDir, dir)
	d := &drill{t: t, setup: s, dir: dir, storeDB: filepath.Join(storeDir, "gateway.db"), apiDB: filepath.Join(dir, "ops.db")}
	d.startAPI()
	d.config = filepath.Join(dir, "gateway.yaml")
	auditBlock, upstreamExtra, ticketsExtra := d.auditConfig()
	config := fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
sweep_interval: 100ms
%supstreams:
  ops: {url: %s, timeout: %s, forward_key: true, honours_key: %t%s}
principals:
  - {name: agent, tenant: acme, roles: [agent], token_sha256: %s}
  - {name: operator, tenant: acme, roles: [admin], token_sha256: %s}
  - {name: alice, tenant: acme, roles: [approver], token_sha256: %s}
  - {name: bob, tenant: acme, roles: [approver], token_sha256: %s}
  - {name: carol, tenant: acme, roles: [agent, approver], token_sha256: %s}
  - {name: eve, tenant: globex, roles: [approver], token_sha256: %s}
routes:
  - {match: POST /v1/tickets, upstream: ops, lease: %s, business_key: /source_event_id%s}
  - {match: "POST /v1/tickets/{id}/comments", upstream: ops, key_from: "header:X-Delivery-Id"}
  - {match: "GET /v1/tickets/{id}", upstream: ops}
  - {match: POST /v1/payment-intents, upstream: ops, business_key: /order_id}
  - {match: "POST /v1/payment-intents/{id}/capture", upstream: ops, lease: 1s%s}
  - {match: GET /v1/payment-intents, upstream: ops}
  - {match: POST /v1/deployments, upstream: ops, concurrency_key: /environment%s}
  - {match: "GET /v1/deployments/{id}", upstream: ops}
%s`, cmp.Or(s.storeDSN, "sqlite:"+d.storeDB+s.storeQuery), auditBlock, d.api.URL, cmp.Or(s.upstreamTimeout, "2s"),
		s.idempotentAPI, upstreamExtra,
		hashOf(token), hashOf(operatorToken), hashOf(approvers["alice"]), hashOf(approvers["bob"]),
		hashOf(approvers["carol"]), hashOf(approvers["eve"]), cmp.Or(s.ticketLease, "1s"), ticketsExtra,
		captureProbe(s.probeCaptures), approvalPolicy(s.approvalTTL), s.config)
	if err := os.WriteFile(d.config, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	d.gw = d.startGateway(s.hold)
	return d
}

// startAPI starts (or restarts, on the same database) the ops API.
func (d *drill) startAPI() {
	args := []string{"opsapi", "--listen", "127.0.0.1:0", "--db", d.apiDB, "--faults", "--deploy-duration",
		cmp.Or(d.setup.deployDuration, 2*time.Second).String()}
	if !d.setup.idempotentAPI {
		args = append(args, "--naive")
	}
	if d.setup.apiLease > 0 {
		args = append(args, "--lease", d.setup.apiLease.String())
	}
	d.api = startProc(d.t, nil, args...)
}

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// startGateway starts one more gateway instance on the drill's store.
func (d *drill) startGateway(hold time.Duration) *testenv.Process {
	var env []string
	if hold > 0 {
		env = append(env, "IDEMGATE_DRILL_HOLD_BEFORE_FORWARD="+hold.String())
	}
	return startProc(d.t, env, "serve", "--config", d.config)
}

type reply struct {
	status int
	header http.Header
	body   string
	err    error
}

// noReuse sends every request on a new connection: Go's transport would
// otherwise re-send a keyed request by itself after some connection errors.
var noReuse = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}

// send sends an agent's request to the gateway; headers come in pairs.
func (d *drill) send(method, path, body string, headers ...string) reply {
	return do(method, d.gw.URL+path, body, append([]string{"Authorization", "Bearer " + token}, headers...)...)
}

// keyed posts with an Idempotency-Key through the gateway.
func (d *drill) keyed(path, key, body string, headers ...string) reply {
	return d.send("POST", path, body, append([]string{"Idempotency-Key", key}, headers...)...)
}

// direct posts with an Idempotency-Key straight to the ops API.
func (d *drill) direct(path, key, body string, headers ...string) reply {
	return do("POST", d.api.URL+path, body, append([]string{"Idempotency-Key", key}, headers...)...)
}

// control calls the gateway's control API as the operator.
func (d *drill) control(method, path, body string) reply {
	return do(method, d.gw.URL+"/_idem/v1"+path, body, "Authorization", "Bearer "+operatorToken)
}

func do(method, url, body string, headers ...string) reply {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := noReuse.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// fault arms a fault in the ops API.
func (d *drill) fault(spec string) {
	resp, err := http.Post(d.api.URL+"/_faults", "application/json", strings.NewReader(spec))
	if err != nil || resp.StatusCode != 200 {
		d.t.Fatalf("arm fault %s: %v %v", spec, err, resp)
	}
	resp.Body.Close()
}

// hold holds the API's next n writes in flight, neither applied nor
// answered, until release: a drill acts while a write is surely at the
// API, however slowly the machine runs, rather than within a delay.
func (d *drill) hold(n int) { d.fault(fmt.Sprintf(`{"hold":%d}`, n)) }

// release lets the writes held at the API go on, and holds no more. It
// may be called from any goroutine, and more than once.
func (d *drill) release() {
	resp, err := http.Post(d.api.URL+"/_faults", "application/json", strings.NewReader(`{"release":true}`))
	if err != nil {
		d.t.Errorf("release the held writes: %v", err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		d.t.Errorf("release the held writes: %s", resp.Status)
	}
}

// waitInFlight waits until the API is performing n writes: a request has
// been forwarded and is being worked on.
func (d *drill) waitInFlight(n int) {
	d.t.Helper()
	waitFor(d.t, fmt.Sprintf("%d write(s) in flight at the API", n), func() bool { return d.inFlight() >= n })
}

// inFlight is how many writes the API is performing now (-1 when it
// cannot say).
func (d *drill) inFlight() int {
	resp, err := http.Get(d.api.URL + "/_faults")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var v struct {
		InFlight int `json:"in_flight"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return -1
	}
	return v.InFlight
}

// waitDeployed waits until the API's controller has finished the
// deployment a 201 answered, so that the environment is free for the
// next.
func (d *drill) waitDeployed(created reply) {
	d.t.Helper()
	var dep struct{ ID int64 }
	if err := json.Unmarshal([]byte(created.body), &dep); err != nil || dep.ID == 0 {
		d.t.Fatalf("no deployment in %+v: %v", created, err)
	}
	waitFor(d.t, "the deployment to finish at the API", func() bool {
		r := do("GET", fmt.Sprintf("%s/v1/deployments/%d", d.api.URL, dep.ID), "")
		return r.status == 200 && strings.Contains(r.body, `"state":"succeeded"`)
	})
}

// killWhileInFlight SIGKILLs p while a write is in flight at the API and
// its client has no answer (answered says whether it has): the fault
// lands where the drill means it to, whatever the machine's load. A
// write still in flight once p is dead was unanswered when p died; if the
// API finished it first, the drill fails, saying so, rather than judging
// a fault that did not happen.
func (d *drill) killWhileInFlight(p *testenv.Process, answered func() bool) {
	d.t.Helper()
	d.waitInFlight(1)
	if answered() {
		d.t.Fatal("the write was answered before the kill: the fault would not land in flight")
	}
	p.Kill()
	if d.inFlight() < 1 {
		d.t.Fatal("the API finished the write before the kill landed: lengthen its delay")
	}
}

// effects reads the API's ground truth.
func (d *drill) effects() map[string]int {
	resp, err := http.Get(d.api.URL + "/v1/effects")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]int{}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		d.t.Fatal(err)
	}
	return out
}

func (d *drill) wantEffects(kind string, n int) {
	d.t.Helper()
	if got := d.effects()[kind]; got != n {
		d.t.Fatalf("%s: %d effects, want %d", kind, got, n)
	}
}

// operation reads an operation straight from the gateway's store.
func (d *drill) operation(key string) *ledger.Operation {
	d.t.Helper()
	return readOperation(d.t, d.storeDB, "acme", key)
}

// apiOperation reads an operation from the ops API's own ledger.
func (d *drill) apiOperation(key string) *ledger.Operation {
	d.t.Helper()
	return readOperation(d.t, d.apiDB, "default", key)
}

func readOperation(t *testing.T, path, tenant, key string) *ledger.Operation {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	op, err := s.GetByKey(context.Background(), ledger.OpKey{Tenant: tenant, Namespace: ledger.NamespaceClients, Key: key})
	if err != nil {
		t.Fatalf("operation %s: %v", key, err)
	}
	return op
}

// history lists an operation's transitions as "from>to:reason".
func (d *drill) history(op *ledger.Operation) []string {
	d.t.Helper()
	s, err := sqlite.Open(context.Background(), d.storeDB, sqlite.Options{MustExist: true})
	if err != nil {
		d.t.Fatal(err)
	}
	defer s.Close()
	events, err := s.History(context.Background(), op.ID)
	if err != nil {
		d.t.Fatal(err)
	}
	var out []string
	for _, e := range events {
		from := string(e.From)
		if e.From == ledger.None {
			from = "none"
		}
		out = append(out, fmt.Sprintf("%s>%s", from, e.To))
	}
	return out
}

// waitFor polls cond until it holds, failing the drill after 90s: a bound for a drill gone wrong, never a window a loaded machine must meet.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exists says whether the gateway's store holds the key.
func (d *drill) exists(key string) bool { return readable(d.storeDB, "acme", key) }

// readable says whether a store file holds the key.
func readable(path, tenant, key string) bool {
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{MustExist: true})
	if err != nil {
		return false
	}
	defer s.Close()
	_, err = s.GetByKey(context.Background(), ledger.OpKey{Tenant: tenant, Namespace: ledger.NamespaceClients, Key: key})
	return err == nil
}

func problemCode(r reply) string {
	var p struct{ Code string }
	_ = json.Unmarshal([]byte(r.body), &p)
	return p.Code
}

// concurrently runs n copies of fn at the same moment.
func concurrently(n int, fn func(i int)) { together.At(n, fn) }

// captureProbe is the capture route's reconcile block, when asked for.
func captureProbe(on bool) string {
	if !on {
		return ""
	}
	return `, reconcile: {probe: 'GET /v1/payment-intents/{{.params.id}}', applied: 'body.status == "captured"',
      not_applied: 'body.status == "requires_capture"', every: 100ms}`
}
