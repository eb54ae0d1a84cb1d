package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/agent"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// TestCallExitCodes runs idemgate call against a gateway that answers
// with the outcome named by the request's path, and checks the printed
// outcome and the documented exit status of every kind, and the agent run
// each request names (Idempotency-Run): --run, else the process's own.
func TestCallExitCodes(t *testing.T) {
	t.Parallel()
	var sends atomic.Int32
	var runsMu sync.Mutex
	var runs []string // the Idempotency-Run of each request, in order
	seen := func() []string {
		runsMu.Lock()
		defer runsMu.Unlock()
		return append([]string(nil), runs...)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runsMu.Lock()
		runs = append(runs, r.Header.Get("Idempotency-Run"))
		runsMu.Unlock()
		if r.URL.Path == "/_idem/v1/operations" && r.Header.Get("Authorization") == "Bearer secret-token" {
			fmt.Fprint(w, `{"id":"op_7","state":"unknown"}`)
			return
		}
		sends.Add(1)
		if r.Header.Get("Authorization") != "Bearer secret-token" || r.Header.Get("Idempotency-Key") == "" {
			w.WriteHeader(500)
			return
		}
		problem := func(status int, code string) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"code":%q,"detail":"d"}`, code)
		}
		w.Header().Set("Idempotency-Operation", "op_7")
		switch r.URL.Path {
		case "/busy":
			w.Header().Set("Retry-After", "600") // past the time budget: it stops at once
			problem(429, "rate_limited")
		case "/created":
			w.WriteHeader(201)
			fmt.Fprint(w, `{"id":"T-1"}`)
		case "/replayed":
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(200)
			fmt.Fprint(w, `plain text`)
		case "/approval":
			w.WriteHeader(202)
			fmt.Fprint(w, `{"code":"approval_required","operation_id":"op_7","state":"prepared",`+
				`"approval":{"id":"apr_7","status":"pending","expires_at":"2030-01-01T00:00:00Z","summary":"s"}}`)
		case "/conflict":
			problem(422, "fingerprint_mismatch")
		case "/rejected":
			problem(422, "invalid_command")
		case "/unauthorized":
			problem(401, "unauthorized")
		case "/unknown":
			problem(409, "outcome_unknown")
		case "/failed":
			problem(403, "approval_denied")
		}
	}))
	defer srv.Close()
	journal := filepath.Join(t.TempDir(), "j.db")
	env := []string{"IDEMGATE_TOKEN=secret-token", "IDEMGATE_URL=" + srv.URL, "IDEMGATE_JOURNAL=" + journal}
	for path, want := range map[string]struct {
		kind string
		code int
	}{"/created": {"created", 0}, "/replayed": {"replayed", 0}, "/approval": {"needs_approval", 4},
		"/conflict": {"conflict", 5}, "/rejected": {"rejected", 6}, "/unauthorized": {"unauthorized", 7},
		"/unknown": {"unknown", 8}, "/failed": {"failed", 9}, "/busy": {"failed", 10}} {
		r := runEnv(t, env, "", "call", "--intent", "i"+path, "POST", path, "-d", `{"a":1}`)
		var v map[string]any
		json.Unmarshal([]byte(r.stdout), &v)
		if r.code != want.code || v["kind"] != want.kind || v["intent"] != "i"+path || v["operation_id"] != "op_7" ||
			v["key"] == "" || v["sent"] != "yes" || v["reason"] == "" || r.stderr != "" {
			t.Errorf("%s: exit %d, %s %s", path, r.code, r.stdout, r.stderr)
		}
	}
	// Each call is a process, with a run of its own.
	distinct, all := map[string]bool{}, seen()
	for _, run := range all {
		if !strings.HasPrefix(run, "run_") || len(run) != len("run_")+26 {
			t.Fatalf("a request named run %q, want run_ and a ULID", run)
		}
		distinct[run] = true
	}
	if len(distinct) != 9 || len(all) != 9 {
		t.Fatalf("9 calls, %d requests, named %d runs: %v", len(all), len(distinct), all)
	}
	// --run names the run: sent as written; a bad one is refused, unsent.
	r := runEnv(t, env, "", "call", "--intent", "i/run", "--run", "wf-42/step 1", "POST", "/created")
	if all = seen(); r.code != 0 || len(all) != 10 || all[9] != "wf-42/step 1" {
		t.Fatalf("--run: %+v, runs %v", r, all)
	}
	for _, bad := range []string{"wf\n42", " wf", strings.Repeat("r", 256)} {
		r = runEnv(t, env, "", "call", "--intent", "i/bad-run", "--run", bad, "POST", "/created")
		if r.code != 2 || !strings.Contains(r.stderr, "--run: invalid run id") || len(seen()) != 10 {
			t.Fatalf("--run %q: %+v, %d requests", bad, r, len(seen()))
		}
	}

	// Resume with a changed payload: refused before sending, exit 2.
	before := sends.Load()
	r = runEnv(t, env, "", "call", "--intent", "i/created", "POST", "/created", "-d", `{"a":2}`)
	if r.code != 2 || !strings.Contains(r.stderr, "differs") || sends.Load() != before {
		t.Fatalf("changed payload: %+v", r)
	}
	// The body from a file, and --repeat: a new intent.
	file := filepath.Join(t.TempDir(), "body.json")
	os.WriteFile(file, []byte(`{ "a" : 1 }`), 0o600)
	r = runEnv(t, env, "", "call", "--intent", "i/created", "--repeat", "POST", "/created", "-d", "@"+file)
	if r.code != 0 || !strings.Contains(r.stdout, `"intent": "i/created#2"`) {
		t.Fatalf("repeat from a file: %+v", r)
	}
	// Usage errors are refusals before sending too.
	for _, args := range [][]string{{"call", "POST", "/created"}, {"call", "--intent", "u", "POST"},
		{"call", "--intent", "u", "--token", "x", "POST", "/created"}, {"call", "--intent", "none", "--revise", "POST", "/created"}} {
		if r := runEnv(t, env, "", args...); r.code != 2 {
			t.Errorf("%v: exit %d, %s", args, r.code, r.stderr)
		}
	}
	// No token: an error, and no flag to pass one.
	r = runEnv(t, []string{"IDEMGATE_URL=" + srv.URL, "IDEMGATE_JOURNAL=" + journal, "IDEMGATE_TOKEN="}, "",
		"call", "--intent", "x", "POST", "/created")
	if r.code != 1 || !strings.Contains(r.stderr, "IDEMGATE_TOKEN") {
		t.Fatalf("no token: %+v", r)
	}
	// Status: the journal's entry and the gateway's lookup.
	r = runEnv(t, env, "", "call", "status", "--intent", "i/unknown")
	if r.code != 0 || !strings.Contains(r.stdout, `"last_kind": "unknown"`) ||
		!strings.Contains(r.stdout, `"reason": "the gateway holds it unknown"`) {
		t.Fatalf("status: %+v", r)
	}
}

// With the gateway down, call says so: nothing was sent, why, and exit 10
// (rerun it later), not the 9 of a failure that rerunning repeats; call
// status says the same, and that the gateway could not be asked. The
// gateway is port 1, where nothing listens (as the other tests' dead
// addresses): a port found free and closed could be another parallel
// test's server by the time call dials it.
func TestCallGatewayUnreachable(t *testing.T) {
	t.Parallel()
	down := "http://127.0.0.1:1"
	env := []string{"IDEMGATE_TOKEN=secret-token", "IDEMGATE_URL=" + down, "IDEMGATE_JOURNAL=" + filepath.Join(t.TempDir(), "j.db")}
	r := runEnv(t, env, "", "call", "--intent", "down", "POST", "/v1/tickets", "-d", `{"a":1}`)
	var v map[string]any
	json.Unmarshal([]byte(r.stdout), &v)
	if r.code != 10 || v["kind"] != "failed" || v["sent"] != "no" || v["unfinished"] != true ||
		!strings.HasPrefix(fmt.Sprint(v["reason"]), "gateway unreachable: connection refused") || r.stderr != "" ||
		strings.Contains(r.stdout, "secret-token") {
		t.Fatalf("exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	r = runEnv(t, env, "", "call", "status", "--intent", "down")
	if r.code != 0 || !strings.Contains(r.stdout, `"sent": "no"`) ||
		!strings.Contains(r.stdout, `"reason": "the gateway could not be asked: connection refused; the journal last recorded failed"`) {
		t.Fatalf("status: %+v", r)
	}
}

// A write that needs approval: exit 4 with the approval in the JSON, and
// in call status; --approval-wait re-sends it with the same key until the
// decision: approved, exit 0; denied, exit 9.
func TestCallNeedsApproval(t *testing.T) {
	t.Parallel()
	exp := time.Now().Add(15 * time.Minute).UTC().Truncate(time.Second)
	var mu sync.Mutex
	seen := map[string][]string{} // Prefer of each request, by key
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret-token" {
			w.WriteHeader(401)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/_idem/v1/operations" {
			json.NewEncoder(w).Encode(contract.View{Summary: contract.Summary{ID: "op_3", State: ledger.Prepared,
				Approval: &contract.ApprovalView{ID: "apr_3", Status: ledger.ApprovalPending, Summary: "Deploy web to production",
					ExpiresAt: exp}}, History: []contract.HistoryEntry{}})
			return
		}
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key] = append(seen[key], r.Header.Get("Prefer"))
		n := len(seen[key])
		mu.Unlock()
		w.Header().Set("Idempotency-Operation", "op_3")
		switch {
		case n > 1 && r.URL.Path == "/approved": // decided while the request was held
			w.WriteHeader(201)
			fmt.Fprint(w, `{"id":"D-1"}`)
			return
		case n > 1 && r.URL.Path == "/denied":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(403)
			fmt.Fprint(w, `{"code":"approval_denied","detail":"the approval for this operation was denied"}`)
			return
		}
		w.WriteHeader(202)
		json.NewEncoder(w).Encode(contract.Accepted{Code: "approval_required", Detail: "a human must approve it",
			OperationID: "op_3", State: ledger.Prepared, Approval: contract.AcceptedApproval{ID: "apr_3",
				Status: ledger.ApprovalPending, ExpiresAt: exp, Summary: "Deploy web to production",
				URL: "/_idem/v1/approvals/apr_3"}})
	}))
	defer srv.Close()
	env := []string{"IDEMGATE_TOKEN=secret-token", "IDEMGATE_URL=" + srv.URL,
		"IDEMGATE_JOURNAL=" + filepath.Join(t.TempDir(), "j.db")}
	type view struct {
		Kind     string
		Key      string
		Reason   string
		Approval map[string]string
	}
	wantApproval := map[string]string{"id": "apr_3", "status": "pending", "summary": "Deploy web to production",
		"expires_at": exp.Format(time.RFC3339), "url": "/_idem/v1/approvals/apr_3"}

	r := runEnv(t, env, "", "call", "--intent", "deploy", "POST", "/pending", "-d", `{"env":"production"}`)
	var v view
	json.Unmarshal([]byte(r.stdout), &v)
	if r.code != 4 || v.Kind != "needs_approval" || fmt.Sprint(v.Approval) != fmt.Sprint(wantApproval) ||
		!strings.Contains(v.Reason, `a human must approve "Deploy web to production"`) ||
		!strings.Contains(v.Reason, "before "+exp.Format(time.RFC3339)) || r.stderr != "" {
		t.Fatalf("needs approval: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	r = runEnv(t, env, "", "call", "status", "--intent", "deploy")
	var st view
	json.Unmarshal([]byte(r.stdout), &st)
	if r.code != 0 || st.Kind != "needs_approval" || st.Approval["id"] != "apr_3" || st.Approval["summary"] == "" ||
		st.Approval["expires_at"] != exp.Format(time.RFC3339) {
		t.Fatalf("status: exit %d, %s", r.code, r.stdout)
	}

	for path, want := range map[string]struct {
		kind string
		code int
	}{"/approved": {"created", 0}, "/denied": {"failed", 9}} {
		r := runEnv(t, env, "", "call", "--intent", "wait"+path, "--approval-wait", "1m", "POST", path, "-d", `{}`)
		var v view
		json.Unmarshal([]byte(r.stdout), &v)
		mu.Lock()
		prefers := seen[v.Key]
		mu.Unlock()
		if r.code != want.code || v.Kind != want.kind || fmt.Sprint(prefers) != "[ wait=15]" {
			t.Errorf("%s: exit %d, %s %s; the gateway saw %v under the key", path, r.code, r.stdout, r.stderr, prefers)
		}
	}
	if r := runEnv(t, env, "", "call", "--intent", "x", "--approval-wait", "-1s", "POST", "/approved"); r.code != 2 {
		t.Fatalf("negative wait: exit %d, %s", r.code, r.stderr)
	}
}

// call --step runs one step of a workflow under its own intent, INTENT/STEP,
// with the key RunWorkflow uses for it: a workflow begun by a script goes
// on in the Go client, which skips the steps call did; a bad step name is
// refused before anything is journaled or sent.
func TestCallStep(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string // the Idempotency-Key of each write
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_idem/v1/operations" {
			fmt.Fprint(w, `{"id":"op_1","state":"succeeded"}`)
			return
		}
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.Header().Set("Idempotency-Operation", "op_1")
		w.WriteHeader(201)
		fmt.Fprint(w, `{"id":"T-1"}`)
	}))
	defer srv.Close()
	sent := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(keys) }
	journal := filepath.Join(t.TempDir(), "j.db")
	env := []string{"IDEMGATE_TOKEN=secret-token", "IDEMGATE_URL=" + srv.URL, "IDEMGATE_JOURNAL=" + journal}

	r := runEnv(t, env, "", "call", "--intent", "dossier_42:v5", "--step", "make-pdf", "POST", "/v1/pdfs", "-d", `{"d":42}`)
	var v map[string]any
	json.Unmarshal([]byte(r.stdout), &v)
	if r.code != 0 || v["kind"] != "created" || v["intent"] != "dossier_42:v5/make-pdf" ||
		v["workflow"] != "dossier_42:v5" || v["step"] != "make-pdf" || len(sent()) != 1 || v["key"] != sent()[0] {
		t.Fatalf("step: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	r = runEnv(t, env, "", "call", "status", "--intent", "dossier_42:v5", "--step", "make-pdf")
	if r.code != 0 || !strings.Contains(r.stdout, `"intent": "dossier_42:v5/make-pdf"`) ||
		!strings.Contains(r.stdout, `"step": "make-pdf"`) {
		t.Fatalf("status of a step: %+v", r)
	}
	for _, args := range [][]string{{"--step", "a/b"}, {"--step", "a#2"}, {"--step", "make-pdf", "--repeat"}} {
		r := runEnv(t, env, "", append(append([]string{"call", "--intent", "dossier_42:v5"}, args...),
			"POST", "/v1/pdfs", "-d", `{"d":42}`)...)
		if r.code != 2 || len(sent()) != 1 {
			t.Errorf("%v: exit %d, %d writes sent: %s", args, r.code, len(sent()), r.stderr)
		}
	}

	ctx := context.Background()
	j, err := agent.OpenJournal(ctx, journal)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	c := &agent.Client{BaseURL: srv.URL, Token: "secret-token", Journal: j}
	out, err := c.RunWorkflow(ctx, agent.Workflow{Intent: "dossier_42:v5", Steps: []agent.Step{
		{Name: "make-pdf", Method: "POST", Path: "/v1/pdfs", Body: []byte(`{"d":42}`)},
		{Name: "store-pdf", Method: "POST", Path: "/v1/files", Body: []byte(`{"d":42}`)}}})
	if err != nil || !out.Done || !out.Steps[0].Skipped || out.Steps[0].Outcome.Key != v["key"] ||
		out.Steps[1].Outcome.Kind != agent.Created || len(sent()) != 2 {
		t.Fatalf("the workflow after call --step: %+v %v (%d writes)", out, err, len(sent()))
	}
}
