package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// The tests run the CLI as a real process, child: this test binary,
// re-executed with mainEnv set, is idemgate; under -race, idemgate built
// once without it (as e2e's), since a race-built child runs its server
// several times slower, and the CLI's hundred-odd children were most of
// make test's time. The race detector covers that code in its own
// packages' in-process tests (cmd/internal/server is every plane of
// serve in one process). That child is testenv's: the one
// IDEMGATE_TEST_BINARY names (make test's bin/idemgate-test, also built
// without -race), else one built for this run.
const mainEnv = "IDEMGATE_TEST_RUN_MAIN"

// child is the program the tests run as idemgate.
var child = os.Args[0]

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	if raceBuilt {
		os.Exit(testenv.MainWithIdemgate(m, &child))
	}
	m.Run()
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runEnv(t, nil, stdin, args...)
}

// childEnv is the environment idemgate runs in as a child: this
// process's with mainEnv set, and env. A race-built child (this test
// binary, when it is the child) would sleep a second before a clean exit
// (GORACE's atexit_sleep_ms); it does not. The agent's secret is set, so that a child
// never makes one in the home directory (a test unsets it to see that).
func childEnv(env ...string) []string {
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	return append(append(os.Environ(), mainEnv+"=1", "GORACE="+gorace, "IDEMGATE_AGENT_SECRET="+agentSecret), env...)
}

// runEnv is run with more environment variables.
func runEnv(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	return runIn(t, env, strings.NewReader(stdin), args...)
}

// runIn is runEnv reading stdin (a terminal, say) instead of a string.
func runIn(t *testing.T, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	cmd := exec.Command(child, args...)
	cmd.Env = childEnv(env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

func TestCanonicalize(t *testing.T) {
	t.Parallel()
	r := run(t, `{"b":1e30,"a":[333333333.3333333,9007199254740994]}`+"\n", "canonicalize")
	if r.code != 0 || r.stdout != `{"a":[333333333.3333333,9007199254740994],"b":1e+30}` {
		t.Fatalf("got %+v", r)
	}
	// Rounding only when asked: the number is 333333333.3333333 to a double.
	rounded := run(t, `{"b":1e30,"a":[333333333.33333329]}`, "canonicalize", "--rfc8785")
	strict := run(t, `{"b":1e30,"a":[333333333.33333329]}`, "canonicalize")
	if rounded.code != 0 || rounded.stdout != `{"a":[333333333.3333333],"b":1e+30}` || strict.code != 1 ||
		!strings.Contains(strict.stderr, "333333333.33333329 would become 333333333.3333333") ||
		!strings.Contains(strict.stderr, "path /a/0") {
		t.Fatalf("--rfc8785: %+v; strict: %+v", rounded, strict)
	}
	dir := filepath.Join("..", "..", "fingerprint", "testdata", "jcs")
	inputs, _ := filepath.Glob(filepath.Join(dir, "input", "*.json"))
	if len(inputs) != 6 {
		t.Fatalf("found %d input vectors in %s, want 6", len(inputs), dir)
	}
	for _, in := range inputs {
		src, _ := os.ReadFile(in)
		want, _ := os.ReadFile(filepath.Join(dir, "output", filepath.Base(in)))
		if r := run(t, string(src), "canonicalize", "--rfc8785"); r.code != 0 || r.stdout != string(want) {
			t.Errorf("%s: %+v", filepath.Base(in), r)
		}
	}
	for in, reason := range map[string]string{
		`{"a":1,"a":2}`:               "duplicate member name",
		`{"amount":9007199254740993}`: "9007199254740993 would become 9007199254740992",
		"\"\xff\"":                    "invalid UTF-8",
		`{"a":`:                       "unexpected end of input",
		``:                            "invalid JSON",
	} {
		r := run(t, in, "canonicalize")
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, reason) {
			t.Errorf("%q: want exit 1 and %q on stderr, got %+v", in, reason, r)
		}
	}
	r = run(t, `[`+strings.Repeat(`"x",`, 100)+`"x"]`, "canonicalize", "--max-bytes", "64")
	if r.code != 1 || !strings.Contains(r.stderr, "too large") {
		t.Errorf("oversized: %+v", r)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	body := `{"title":"Disk full","priority":2}`
	r := run(t, body, "fingerprint", "--method", "POST", "--route", "/v1/tickets", "--tenant", "acme",
		"--header", "X-Region: eu")
	cmd, _ := fingerprint.Parse([]byte(body), fingerprint.Limits{})
	want, _ := fingerprint.Of(fingerprint.Request{Method: "POST", Route: "/v1/tickets", Tenant: "acme",
		Command: cmd, Headers: map[string]string{"x-region": "eu"}})
	if r.code != 0 || r.stdout != want+"\n" {
		t.Fatalf("got %+v, want %s", r, want)
	}
	empty := run(t, "", "fingerprint", "--method", "POST", "--route", "/v1/p/{id}/capture", "--tenant", "acme")
	wantEmpty, _ := fingerprint.Of(fingerprint.Request{Method: "POST", Route: "/v1/p/{id}/capture", Tenant: "acme"})
	if empty.code != 0 || empty.stdout != wantEmpty+"\n" {
		t.Fatalf("empty body: %+v", empty)
	}
	if r := run(t, body, "fingerprint", "--method", "POST", "--route", "/v1/tickets"); r.code == 0 ||
		!strings.Contains(r.stderr, "tenant") {
		t.Errorf("missing --tenant: %+v", r)
	}
	if r := run(t, `{"a":1,"a":2}`, "fingerprint", "--method", "POST", "--route", "/r", "--tenant", "t"); r.code != 1 ||
		!strings.Contains(r.stderr, "duplicate") {
		t.Errorf("bad body: %+v", r)
	}
}

// TestFingerprintTargetAndBodies: --param, --query and --content-type give
// the fingerprint the library computes for the same request.
func TestFingerprintTargetAndBodies(t *testing.T) {
	t.Parallel()
	capture := []string{"fingerprint", "--method", "POST", "--route", "/v1/payment-intents/{id}/capture", "--tenant", "acme"}
	form := "amount_to_capture=1999&expand[]=customer&expand[]=invoice"
	r := run(t, form, append(capture, "--param", "id=pi_1", "--query", "dry_run=true&tag=b&tag=a",
		"--content-type", "application/x-www-form-urlencoded; charset=utf-8")...)
	cmd, _ := fingerprint.ParseForm([]byte(form), fingerprint.Limits{})
	want, _ := fingerprint.Of(fingerprint.Request{Method: "POST", Route: "/v1/payment-intents/{id}/capture",
		Tenant: "acme", Command: cmd, Params: map[string]string{"id": "pi_1"},
		Query: map[string][]string{"dry_run": {"true"}, "tag": {"b", "a"}}})
	if r.code != 0 || r.stdout != want+"\n" {
		t.Fatalf("form body: %+v, want %s", r, want)
	}
	other := run(t, form, append(capture, "--param", "id=pi_2", "--query", "dry_run=true&tag=b&tag=a",
		"--content-type", "application/x-www-form-urlencoded")...)
	if other.code != 0 || other.stdout == r.stdout {
		t.Errorf("another payment intent: %+v", other)
	}
	opaque := run(t, "%PDF-1.7\n", append(capture, "--param", "id=pi_1", "--opaque", "--content-type", "Application/PDF")...)
	want, _ = fingerprint.Of(fingerprint.Request{Method: "POST", Route: "/v1/payment-intents/{id}/capture",
		Tenant: "acme", Params: map[string]string{"id": "pi_1"}, Command: map[string]any{
			"sha256": "0716f9264c9fe19f5d7455276107f3ddcc1d3497f63d60689a73558ae8a1bf5e", "type": "application/pdf"}})
	if opaque.code != 0 || opaque.stdout != want+"\n" {
		t.Errorf("opaque body: %+v, want %s", opaque, want)
	}
	for reason, args := range map[string][]string{
		"want NAME=VALUE":          {"--param", "id"},
		"id given twice":           {"--param", "id=1", "--param", "id=2"},
		"without its leading '?'":  {"--query", "?dry_run=true"},
		`invalid URL escape "%zz"`: {"--query", "a=%zz"},
		"text/plain was sent":      {"--content-type", "text/plain"},
		"cannot be represented":    {"--content-type", "application/merge-patch+json"},
	} {
		r := run(t, `{"amount":9007199254740993}`, append(capture, args...)...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, reason) {
			t.Errorf("%v: want exit 1 and %q on stderr, got %+v", args, reason, r)
		}
	}
}

func TestMigrateTwiceAndAtOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		dsn := db.DSN
		var wg sync.WaitGroup
		results := make([]result, 3)
		for i := range results {
			wg.Add(1)
			go func() { defer wg.Done(); results[i] = run(t, "", "migrate", "--store", dsn) }()
		}
		wg.Wait()
		for i, r := range results {
			if r.code != 0 || r.stdout != "migrated\n" {
				t.Fatalf("concurrent migrate %d: %+v", i, r)
			}
		}
		if r := run(t, "", "migrate", "--store", dsn); r.code != 0 {
			t.Fatalf("migrate again: %+v", r)
		}
	})
	if r := run(t, "", "migrate", "--store", "mysql://x"); r.code != 1 || !strings.Contains(r.stderr, "sqlite:PATH") {
		t.Errorf("unknown store kind: %+v", r)
	}
	if r := run(t, "", "migrate", "--store", "sqlite:/tmp/x.db?synchronous=sometimes"); r.code != 1 ||
		!strings.Contains(r.stderr, "synchronous") {
		t.Errorf("bad synchronous: %+v", r)
	}
}

func TestOps(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		dsn, s := db.DSN, db.Open(t)
		c := context.Background()
		var ops []*ledger.Operation
		var leases []*ledger.Lease
		for i, tenant := range []string{"acme", "acme", "globex"} {
			r, err := s.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
				Tenant: tenant, Key: "k" + string(rune('a'+i)),
				Route: "/v1/tickets", Fingerprint: "sha256:aa", Lease: time.Hour, Retention: time.Hour, Actor: "gw"})
			if err != nil {
				t.Fatal(err)
			}
			ops, leases = append(ops, r.Op), append(leases, r.Lease)
		}
		// A stored body may hold personal data: no view shows it.
		if _, err := s.Complete(c, *leases[0], ledger.Outcome{State: ledger.Succeeded,
			Response: &ledger.Response{Status: 201, Body: []byte(`{"email":"pii@example.com"}`)}}); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"show", ops[0].ID}, {"show", ops[0].ID, "--json"}, {"list", "--json"}} {
			r := run(t, "", append(append([]string{"ops"}, args...), "--store", dsn)...)
			if r.code != 0 || strings.Contains(r.stdout, "pii@") || !strings.Contains(r.stdout, "201") && args[0] == "show" {
				t.Fatalf("ops %v: %+v", args, r)
			}
		}

		r := run(t, "", "ops", "list", "--store", dsn, "--tenant", "acme")
		if r.code != 0 || !strings.Contains(r.stdout, ops[0].ID) || !strings.Contains(r.stdout, ops[1].ID) ||
			strings.Contains(r.stdout, ops[2].ID) || !strings.HasPrefix(r.stdout, "ID") {
			t.Fatalf("ops list --tenant acme: %+v", r)
		}
		r = run(t, "", "ops", "list", "--store", dsn, "--limit", "2", "--json")
		var lv contract.ListView
		if err := json.Unmarshal([]byte(r.stdout), &lv); err != nil || r.code != 0 {
			t.Fatalf("ops list --json: %v %+v", err, r)
		}
		if len(lv.Operations) != 2 || lv.Next == nil || *lv.Next != ops[1].ID {
			t.Fatalf("first page: %+v", lv)
		}
		r = run(t, "", "ops", "list", "--store", dsn, "--after", *lv.Next, "--json", "--state", "executing")
		lv = contract.ListView{}
		if err := json.Unmarshal([]byte(r.stdout), &lv); err != nil || len(lv.Operations) != 1 ||
			lv.Operations[0].ID != ops[2].ID || lv.Next != nil {
			t.Fatalf("second page: %+v %v", lv, err)
		}
		if r := run(t, "", "ops", "list", "--store", dsn, "--state", "done"); r.code != 1 ||
			!strings.Contains(r.stderr, "unknown state") {
			t.Fatalf("bad state: %+v", r)
		}

		r = run(t, "", "ops", "show", ops[2].ID, "--store", dsn, "--json")
		var v map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 {
			t.Fatalf("ops show --json: %v %+v", err, r)
		}
		for _, field := range []string{"id", "key", "tenant", "route", "state", "fingerprint", "attempts",
			"created_at", "updated_at", "lease_until", "expires_at", "response", "approval", "history"} {
			if _, ok := v[field]; !ok {
				t.Errorf("ops show --json lacks %q: %s", field, r.stdout)
			}
		}
		r = run(t, "", "ops", "show", ops[2].ID, "--store", dsn)
		if r.code != 0 || !strings.Contains(r.stdout, "globex") || !strings.Contains(r.stdout, "reserve with lease") {
			t.Fatalf("ops show: %+v", r)
		}
		if r := run(t, "", "ops", "show", "op_nope", "--store", dsn); r.code != 1 || !strings.Contains(r.stderr, "not found") {
			t.Fatalf("ops show missing: %+v", r)
		}
		// An operation waiting for a human: show says which approval,
		// and --json carries it whole, as the control API renders it.
		waiting, err := s.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
			Tenant: "acme", Key: "deploy", Route: "/v1/deployments",
			Fingerprint: "sha256:bb", Retention: time.Hour, Actor: "gw", Approval: &ledger.ApprovalRequest{
				Target: "POST /v1/deployments", Summary: "Deploy api to production", Command: []byte(`{}`),
				RequestedBy: "agent", Approvers: []string{"approver"}, TTL: time.Hour, ValidFor: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		r = run(t, "", "ops", "show", waiting.Op.ID, "--store", dsn)
		if r.code != 0 || !strings.Contains(r.stdout, waiting.Op.Approval.ID+" pending") ||
			!strings.Contains(r.stdout, "Deploy api to production") {
			t.Fatalf("ops show of a waiting operation: %+v", r)
		}
		r = run(t, "", "ops", "show", waiting.Op.ID, "--store", dsn, "--json")
		if r.code != 0 || !strings.Contains(r.stdout, `"summary": "Deploy api to production"`) {
			t.Fatalf("ops show --json of a waiting operation: %+v", r)
		}
		testResolve(t, s, dsn, ops[1], *leases[1])
		if db.Kind == dbtest.KindSQLite {
			missing := "sqlite:" + filepath.Join(t.TempDir(), "typo.db")
			r := run(t, "", "ops", "list", "--store", missing)
			if r.code != 1 || !strings.Contains(r.stderr, "idemgate migrate") {
				t.Fatalf("ops list on a missing file: %+v", r)
			}
			if _, err := os.Stat(strings.TrimPrefix(missing, "sqlite:")); err == nil {
				t.Fatal("ops list created the missing file")
			}
		}
	})
}

// testResolve settles an unknown operation with ops resolve, and checks
// what it refuses.
func testResolve(t *testing.T, s ledger.Store, dsn string, op *ledger.Operation, lease ledger.Lease) {
	t.Helper()
	for _, bad := range [][]string{{"--state", "done", "--note", "x"}, {"--state", "succeeded"},
		{"--state", "succeeded", "--note", "x"}} { // the last: it is still executing
		r := run(t, "", append([]string{"ops", "resolve", op.ID, "--store", dsn}, bad...)...)
		if r.code != 1 {
			t.Fatalf("ops resolve %v: %+v", bad, r)
		}
	}
	if _, err := s.MarkUnknown(context.Background(), lease, ledger.Note{Reason: "upstream_timeout"}); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "ops", "resolve", op.ID, "--store", dsn, "--state", "succeeded", "--note", "capture found",
		"--actor", "alice", "--json")
	var v contract.View
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 || v.State != ledger.Succeeded {
		t.Fatalf("ops resolve: %v %+v", err, r)
	}
	last := v.History[len(v.History)-1]
	if last.Actor != "alice" || last.Reason != "capture found" {
		t.Fatalf("history: %+v", last)
	}
	if r := run(t, "", "ops", "resolve", op.ID, "--store", dsn, "--state", "failed", "--note", "x"); r.code != 1 ||
		!strings.Contains(r.stderr, "only an unknown operation") {
		t.Fatalf("resolve twice: %+v", r)
	}
}
