package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/sqlite"
)

// startGateway starts serve on config, as a real process, and waits for
// it to listen.
func startGateway(t *testing.T, config string) *testenv.Process {
	t.Helper()
	cmd := exec.Command(child, "serve", "--config", config)
	cmd.Env = childEnv()
	return testenv.StartProcess(t, cmd)
}

// slowUpstream applies each write, counting it, then answers after hold,
// or at its release (the test's end at the latest) if that comes first;
// requests with the same Idempotency-Key are one effect when dedup is on.
type slowUpstream struct {
	srv     *httptest.Server
	effects atomic.Int64
	started chan struct{}
	hold    time.Duration
	ended   chan struct{} // closed by release
	release func()        // answers the writes held now, and holds no more
	mu      sync.Mutex
	keys    map[string]bool
}

func newSlowUpstream(t *testing.T, hold time.Duration) *slowUpstream {
	u := &slowUpstream{started: make(chan struct{}, 1000), hold: hold, ended: make(chan struct{}), keys: map[string]bool{}}
	u.release = sync.OnceFunc(func() { close(u.ended) })
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		dup := strings.HasPrefix(r.URL.Path, "/dedup") && u.keys[key]
		u.keys[key] = true
		u.mu.Unlock()
		if !dup {
			u.effects.Add(1)
		}
		u.started <- struct{}{}
		select {
		case <-time.After(u.hold):
		case <-u.ended:
		}
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"done":%q}`, key)
	}))
	t.Cleanup(u.srv.Close)
	t.Cleanup(u.release) // first: Close waits for the answers
	return u
}

func hashOf(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

func writeConfig(t *testing.T, store, upstream string, extra string) string {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
sweep_interval: 100ms
shutdown_timeout: 5s
upstreams:
  app: {url: %s, timeout: 10s, forward_key: true}
  dedup: {url: %s, timeout: 10s, forward_key: true, honours_key: true}
principals:
  - {name: agent, tenant: acme, roles: [agent], token_sha256: %s}
routes:
  - {match: POST /v1/writes, upstream: app, lease: 1s}
  - {match: POST /dedup/writes, upstream: dedup, lease: 1s}
%s`, store, upstream, upstream, hashOf("agent-token"), extra)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func post(t *testing.T, base, path, key string, headers ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+path, strings.NewReader(`{"n":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer agent-token")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeRefusesABadConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("store: sqlite:/tmp/x.db\nroutes:\n  - {match: POST /x, upstream: nowhere}\n"), 0o600)
	r := run(t, "", "serve", "--config", path)
	if r.code != 1 || !strings.Contains(r.stderr, path+`:3: route POST /x: upstream "nowhere" is not defined`) {
		t.Fatalf("bad config: %+v", r)
	}
}

// TestServeRefusesAnEmptyWebhookSecret: a webhook route whose secret
// comes from a variable set but empty does not start: the error names the
// file and the line, and no store is opened (nothing could be reserved).
func TestServeRefusesAnEmptyWebhookSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "hooks.yaml")
	os.WriteFile(path, []byte("store: sqlite:"+filepath.Join(dir, "gw.db")+"\nupstreams:\n  ops: {url: http://127.0.0.1:1}\n"+
		"routes:\n  - match: POST /hooks\n    upstream: ops\n    webhook:\n      scheme: stripe\n"+
		"      secret: ${IDEMGATE_TEST_HOOK_SECRET}\n      tenant: acme\n"), 0o600)
	r := runEnv(t, []string{"IDEMGATE_TEST_HOOK_SECRET="}, "", "serve", "--config", path)
	if r.code != 1 || !strings.Contains(r.stderr, path+":9: route POST /hooks: webhook: secret 1 is empty") {
		t.Fatalf("empty secret: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "gw.db")); !os.IsNotExist(err) {
		t.Fatalf("the store was opened: %v", err)
	}
}

// TestCrashMidRequest: the gateway is killed (SIGKILL) while the upstream
// applies a write. After a restart the operation turns unknown once its
// lease lapses, and is never re-sent, except, with the same key, to an
// upstream that honours it.
func TestCrashMidRequest(t *testing.T) {
	t.Parallel()
	up := newSlowUpstream(t, time.Hour) // until the kill has landed
	dbPath := filepath.Join(t.TempDir(), "gw.db")
	config := writeConfig(t, "sqlite:"+dbPath, up.srv.URL, "")
	g := startGateway(t, config)
	for _, path := range []string{"/v1/writes", "/dedup/writes"} {
		go post(t, g.URL, path, "crash-"+path)
		<-up.started
	}
	g.Cmd.Process.Signal(syscall.SIGKILL)
	<-g.Done
	up.release()
	g = startGateway(t, config)
	waitUnknown(t, dbPath, 2) // leases lapse; the sweep runs every 100ms
	status, body := post(t, g.URL, "/v1/writes", "crash-/v1/writes")
	if status != 409 || !strings.Contains(body, "outcome_unknown") {
		t.Fatalf("retry after the crash: %d %s", status, body)
	}
	status, body = post(t, g.URL, "/dedup/writes", "crash-/dedup/writes")
	if status != 201 || !strings.Contains(body, "crash-/dedup/writes") {
		t.Fatalf("retry to an upstream that honours the key: %d %s", status, body)
	}
	if n := up.effects.Load(); n != 2 {
		t.Fatalf("%d effects, want one per key", n)
	}
}

// waitUnknown waits until n operations of the store at dbPath are unknown:
// the event the sweep makes, rather than a time it may miss on a loaded
// machine (a minute is a bound for a stuck test, not a window).
func waitUnknown(t *testing.T, dbPath string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		r := run(t, "", "ops", "list", "--store", "sqlite:"+dbPath, "--json")
		if strings.Count(r.stdout, `"state": "unknown"`) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d unknown operations after a minute: %s", n, r.stdout)
		}
	}
}

// TestGracefulShutdown: SIGTERM lets the request in flight finish.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	up := newSlowUpstream(t, 500*time.Millisecond)
	g := startGateway(t, writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "gw.db"), up.srv.URL, ""))
	result := make(chan int)
	go func() { s, _ := post(t, g.URL, "/v1/writes", "graceful"); result <- s }()
	<-up.started
	g.Cmd.Process.Signal(syscall.SIGTERM)
	if s := <-result; s != 201 {
		t.Fatalf("the request in flight got %d", s)
	}
	if err := <-g.Done; err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// TestTwoInstancesOneEffect: two gateway processes on one PostgreSQL share a
// storm of 200 copies of one request: one effect, and every copy gets its
// answer. The route's lease is a production one: with the 1s lease of the
// crash tests, a store held up for a second under a loaded CI machine lets
// the lease lapse, and the operation rightly becomes unknown.
func TestTwoInstancesOneEffect(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.PostgresSchema(t)
	up := newSlowUpstream(t, 100*time.Millisecond)
	config := writeConfig(t, dsn, up.srv.URL, "  - {match: POST /v1/storm, upstream: app, lease: 30s}\n")
	a, b := startGateway(t, config), startGateway(t, config)
	var wg sync.WaitGroup
	var ok, other atomic.Int64
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := a.URL
			if i%2 == 1 {
				base = b.URL
			}
			status, body := post(t, base, "/v1/storm", "storm", "Prefer", "wait=10")
			if status == 201 {
				ok.Add(1)
			} else if other.Add(1) == 1 {
				t.Logf("a copy got %d %s", status, body)
			}
		}()
	}
	wg.Wait()
	if n := up.effects.Load(); n != 1 || ok.Load() != 200 {
		t.Fatalf("%d effects; %d got the answer, %d did not", n, ok.Load(), other.Load())
	}
}

// TestLogsHoldNoSecrets: one JSON line per request, and neither the token,
// the key, the query nor the body in any of them.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	up := newSlowUpstream(t, 0)
	g := startGateway(t, writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "gw.db"), up.srv.URL, ""))
	req, _ := http.NewRequest("POST", g.URL+"/v1/writes?email=pii@example.com", strings.NewReader(`{"card":"4111-secret"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer agent-token")
	req.Header.Set("Idempotency-Key", "key-visible-only-to-the-store")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("request: %v", err)
	}
	resp.Body.Close()
	g.Cmd.Process.Signal(syscall.SIGTERM)
	<-g.Done
	requests := 0
	for _, line := range g.Logs() {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil && line != "" {
			t.Fatalf("not a JSON line: %q", line)
		}
		if entry["msg"] == "request" {
			requests++
		}
		for _, secret := range []string{"agent-token", "key-visible", "pii@", "4111-secret", "card"} {
			if strings.Contains(line, secret) {
				t.Fatalf("log line holds %q: %s", secret, line)
			}
		}
	}
	if requests != 1 {
		t.Fatalf("%d request lines", requests)
	}
}

// TestShutdownCutsOffWithoutClaimingSuccess: a request still running when
// the shutdown deadline passes is never recorded as succeeded; it stays
// executing, and its lease makes it unknown.
func TestShutdownCutsOffWithoutClaimingSuccess(t *testing.T) {
	t.Parallel()
	// The upstream answers only at the test's end, and the gateway would
	// wait an hour for it: only the shutdown deadline can end the request
	// and let the gateway stop, however slow the machine.
	up := newSlowUpstream(t, time.Hour)
	dbPath := filepath.Join(t.TempDir(), "gw.db")
	config := writeConfig(t, "sqlite:"+dbPath, up.srv.URL, "")
	text, _ := os.ReadFile(config)
	text = []byte(strings.Replace(string(text), "shutdown_timeout: 5s", "shutdown_timeout: 200ms", 1))
	os.WriteFile(config, []byte(strings.ReplaceAll(string(text), "timeout: 10s", "timeout: 1h")), 0o600)
	g := startGateway(t, config)
	go post(t, g.URL, "/v1/writes", "cut-off")
	<-up.started
	g.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.Done:
	case <-time.After(testenv.Bound):
		t.Fatal("the gateway did not stop at its shutdown deadline")
	}
	r := run(t, "", "ops", "list", "--store", "sqlite:"+dbPath, "--json")
	if !strings.Contains(r.stdout, `"state": "executing"`) {
		t.Fatalf("after the cut-off: %s", r.stdout)
	}
	g = startGateway(t, config)
	waitUnknown(t, dbPath, 1) // the 1s lease lapses; the sweep runs every 100ms
	if status, body := post(t, g.URL, "/v1/writes", "cut-off"); status != 409 || !strings.Contains(body, "outcome_unknown") {
		t.Fatalf("retry after the cut-off: %d %s", status, body)
	}
}

// TestShutdownWithAProbeInFlight: serve is stopped (SIGTERM) while the
// reconciler's probe of an unknown operation waits on the upstream, with
// an audit log. The stop is orderly: the probe's cut is recorded as an
// "answered" event, the audit batcher writes it, then the final seal
// covers it, and only then does the store close; run returns without a
// panic (a Record into a closed batcher crashed the process).
func TestShutdownWithAProbeInFlight(t *testing.T) {
	t.Parallel()
	inFlight := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case inFlight <- struct{}{}:
		default:
		}
		<-r.Context().Done() // the probe waits until the stop cuts it
	}))
	defer up.Close()
	dir := t.TempDir()
	key := filepath.Join(dir, "audit.key")
	if _, err := audit.Keygen(key, "shutdown-test"); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "gw.db")
	cfg, err := config.Parse(filepath.Join(dir, "gw.yaml"), []byte(fmt.Sprintf(`store: sqlite:%s
listen: 127.0.0.1:0
shutdown_timeout: 5s
upstreams: {pay: {url: %s, timeout: 30s}}
routes:
  - match: "POST /v1/intents/{id}/capture"
    upstream: pay
    reconcile: {probe: 'GET /v1/intents/{{.params.id}}', applied: 'status == 200', not_applied: 'status == 404', every: 1ms}
audit: {signing_key: %s, checkpoint_interval: 1h}
`, db, up.URL, key)))
	if err != nil {
		t.Fatal(err)
	}
	opID := unknownCapture(t, db)
	_, stop := serveInProcess(t, cfg)
	<-inFlight
	if err := stop(); err != nil { // SIGTERM
		t.Fatalf("run: %v", err)
	}
	s, err := sqlite.Open(context.Background(), db, sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.AuditEvents(context.Background(), ledger.AuditParams{OperationID: opID})
	if err != nil {
		t.Fatal(err)
	}
	answered := 0
	for _, e := range evs {
		if e.Kind == audit.Answered {
			answered++
		}
		if e.Seq < 0 {
			t.Errorf("event %s %s is not sealed after a graceful stop", e.Kind, e.Reason)
		}
	}
	if answered == 0 {
		t.Fatalf("the cut probe left no answered event: %+v", evs)
	}
}

// unknownCapture makes, in the store at path, a capture whose outcome is
// unknown and whose probe is due at once.
func unknownCapture(t *testing.T, path string) string {
	t.Helper()
	s := dbtest.SQLiteAt(t, path)
	defer s.Close() // before the gateway opens the file
	r, err := s.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "cap-7",
		Route: "POST /v1/intents/{id}/capture", Fingerprint: "sha256:" + strings.Repeat("a", 64), Lease: time.Minute,
		Retention: time.Hour, Actor: "gw", Probe: "GET /v1/intents/7"})
	if err == nil {
		_, err = s.MarkUnknown(context.Background(), *r.Lease, ledger.Note{Reason: "answer lost"})
	}
	if err != nil {
		t.Fatal(err)
	}
	return r.Op.ID
}

// serveInProcess runs serve's own listen and run on cfg in this process;
// stop is its SIGTERM, and returns what run returned.
func serveInProcess(t *testing.T, cfg *config.Config) (addr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	gs, err := listenGateway(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gs.run(ctx) }()
	return gs.addr(), func() error { cancel(); return <-done }
}

// TestServeWaitsForItsBrokers: serve with consumers whose brokers are
// down serves its routes all the same, says it keeps trying (never with
// a broker's password), and stops at once on SIGTERM.
func TestServeWaitsForItsBrokers(t *testing.T) {
	t.Parallel()
	up := newSlowUpstream(t, 0)
	consumers := `consumers:
  - {name: events, tenant: acme, source: {nats: "nats://idemgate:broker-secret@127.0.0.1:1", stream: S, consumer: c}, deliver: {upstream: app, path: /v1/writes}, dead_letter: {subject: dead}}
  - {name: orders, tenant: acme, source: {amqp: "amqp://guest:broker-secret@127.0.0.1:1/", queue: q}, deliver: {upstream: app, path: /v1/writes}, dead_letter: {routing_key: dead}}
`
	g := startGateway(t, writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "gw.db"), up.srv.URL, consumers))
	if status, body := post(t, g.URL, "/v1/writes", "while-brokers-are-down"); status != 201 {
		t.Fatalf("a write while the brokers are down: %d %s", status, body)
	}
	waitLog := func(consumer string) {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for _, line := range g.Logs() {
				if strings.Contains(line, `"consumer interrupted; trying again"`) && strings.Contains(line, `"consumer":"`+consumer+`"`) {
					return
				}
			}
		}
		t.Fatalf("consumer %s never said it keeps trying: %v", consumer, g.Logs())
	}
	waitLog("events")
	waitLog("orders")
	for _, line := range g.Logs() {
		if strings.Contains(line, "broker-secret") {
			t.Fatalf("a broker's password reached the logs: %s", line)
		}
	}
	g.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-g.Done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
}
