package httpidem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/ledger"
)

// deployApp is a counting deployment handler behind the middleware, whose
// production deployments need an approver's decision, with the approvals
// control API beside it. Callers name themselves with X-Principal, their
// tenant with X-Tenant and their roles with X-Roles.
type deployApp struct {
	t       *testing.T
	store   ledger.Store
	srv     *httptest.Server
	effects atomic.Int64
	sent    atomic.Pointer[http.Header] // the headers of the last deployment
}

func newDeployApp(t *testing.T, s ledger.Store, cfg approval.Config) *deployApp {
	t.Helper()
	pol, err := approval.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &deployApp{t: t, store: s}
	principal := func(r *http.Request) (approval.Principal, error) {
		p := approval.Principal{Name: r.Header.Get("X-Principal"), Tenant: r.Header.Get("X-Tenant")}
		if p.Name == "" || p.Tenant == "" {
			return p, errors.New("no principal")
		}
		if roles := r.Header.Get("X-Roles"); roles != "" {
			p.Roles = strings.Split(roles, ",")
		}
		return p, nil
	}
	m, err := httpidem.New(httpidem.Options{Store: s, StatusBase: "/_idem/v1", Principal: principal,
		Tenant: func(r *http.Request) (string, error) { p, err := principal(r); return p.Tenant, err },
		Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/services/{service}/deployments", Approval: pol,
			ConcurrencyKey: "/environment"}}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/services/{service}/deployments", func(w http.ResponseWriter, r *http.Request) {
		n := a.effects.Add(1)
		h := r.Header.Clone()
		a.sent.Store(&h)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"deployment":"D-%d"}`, n)
	})
	// The approvals are decided through the control plane, as a service
	// that mounts package control beside its handlers does.
	api, err := control.New(control.Options{Operator: &control.Operator{Store: s, Wake: m.Changed},
		Caller: func(r *http.Request) (approval.Principal, bool) { p, err := principal(r); return p, err == nil }})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/_idem/v1/", api)
	a.srv = httptest.NewServer(m.Handler(mux))
	t.Cleanup(a.srv.Close)
	return a
}

// prodPolicy is the reference policy: production deployments need an
// approver, and say what they do.
var prodPolicy = approval.Config{When: `body.environment == "production"`, TTL: time.Hour,
	Summary: `Deploy {{.body.artifact}} to {{.body.environment}} ({{.params.service}})`}

// do sends a request as principal (name:tenant:roles).
func (a *deployApp) do(method, path, principal, key, body string, extra ...string) reply {
	a.t.Helper()
	req, _ := http.NewRequest(method, a.srv.URL+path, strings.NewReader(body))
	name, rest, _ := strings.Cut(principal, ":")
	tenant, roles, _ := strings.Cut(rest, ":")
	req.Header.Set("X-Principal", name)
	req.Header.Set("X-Tenant", tenant)
	req.Header.Set("X-Roles", roles)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

const (
	agent = "bot:acme:agent"
	alice = "alice:acme:approver"
	prod  = `{"artifact":"api@sha256:aaaa","environment":"production"}`
)

func (a *deployApp) deploy(key, body string, extra ...string) reply {
	a.t.Helper()
	return a.do("POST", "/v1/services/api/deployments", agent, key, body, extra...)
}

// accepted decodes a 202.
func accepted(t *testing.T, r reply) contract.Accepted {
	t.Helper()
	var acc contract.Accepted
	if r.status != http.StatusAccepted || json.Unmarshal([]byte(r.body), &acc) != nil || acc.Approval.ID == "" {
		t.Fatalf("want 202 with an approval, got %d %s", r.status, r.body)
	}
	return acc
}

// decide posts a decision as principal; fp "" echoes the approval's own.
func (a *deployApp) decide(verb, principal, id, fp string) reply {
	a.t.Helper()
	if fp == "" {
		got := a.do("GET", "/_idem/v1/approvals/"+id, principal, "", "")
		var v contract.ApprovalView
		if err := json.Unmarshal([]byte(got.body), &v); err != nil {
			a.t.Fatalf("approval %s: %d %s", id, got.status, got.body)
		}
		fp = v.Fingerprint
	}
	body, _ := json.Marshal(contract.Decision{Fingerprint: fp, Note: "looked fine"})
	return a.do("POST", "/_idem/v1/approvals/"+id+"/"+verb, principal, "", string(body))
}

// TestApprovalLifecycle: a production deploy waits (202, nothing sent),
// identical retries never ask twice, the approver decides on the
// fingerprint it was shown, the first retry after it deploys once, later
// ones replay, and a changed artifact is refused under the key and needs a
// new approval under a new one.
func TestApprovalLifecycle(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		first := a.deploy("dep-1", prod)
		acc := accepted(t, first)
		if acc.Code != contract.CodeApprovalRequired || acc.State != ledger.Prepared ||
			acc.Approval.Summary != "Deploy api@sha256:aaaa to production (api)" ||
			first.header.Get("Location") != "/_idem/v1/operations/"+acc.OperationID ||
			first.header.Get(contract.HeaderOperation) != acc.OperationID {
			t.Fatalf("202: %+v %v", acc, first.header)
		}
		for range 3 {
			if again := accepted(t, a.deploy("dep-1", prod)); again.Approval.ID != acc.Approval.ID {
				t.Fatalf("a retry opened another approval: %+v", again)
			}
		}
		got := a.do("GET", "/_idem/v1/approvals/"+acc.Approval.ID, alice, "", "")
		var v contract.ApprovalView
		if err := json.Unmarshal([]byte(got.body), &v); err != nil || v.OperationID != acc.OperationID ||
			v.Key != "dep-1" || v.Target != "POST /v1/services/api/deployments" || v.RequestedBy != "bot" ||
			string(v.Command) != `{"artifact":"api@sha256:aaaa","environment":"production"}` || !ledger.ValidFingerprint(v.Fingerprint) {
			t.Fatalf("approval view %s", got.body)
		}
		if d := a.decide("approve", alice, acc.Approval.ID, ""); d.status != 200 {
			t.Fatalf("approve: %d %s", d.status, d.body)
		}
		if a.effects.Load() != 0 {
			t.Fatal("deployed before the retry")
		}
		run := a.deploy("dep-1", prod)
		if run.status != 201 || run.header.Get(contract.HeaderReplayed) != "" || a.effects.Load() != 1 {
			t.Fatalf("retry after approval: %d %s, %d effects", run.status, run.body, a.effects.Load())
		}
		replay := a.deploy("dep-1", prod)
		if replay.status != 201 || replay.body != run.body || replay.header.Get(contract.HeaderReplayed) != "true" {
			t.Fatalf("replay: %+v", replay)
		}
		changed := `{"artifact":"api@sha256:bbbb","environment":"production"}`
		if r := a.deploy("dep-1", changed); r.status != 422 || problemCode(t, r) != contract.CodeFingerprintMismatch {
			t.Fatalf("changed artifact under the key: %d %s", r.status, r.body)
		}
		if r := a.deploy("dep-1", strings.Replace(prod, "aaaa", "aaab", 1)); r.status != 422 {
			t.Fatalf("a one-byte change under the key: %d %s", r.status, r.body)
		}
		if r := a.do("POST", "/v1/services/web/deployments", agent, "dep-1", prod); r.status != 422 ||
			problemCode(t, r) != contract.CodeFingerprintMismatch {
			t.Fatalf("another service (path parameter) under the key: %d %s", r.status, r.body)
		}
		if r := a.do("POST", "/v1/services/api/deployments?force=true", agent, "dep-1", prod); r.status != 422 {
			t.Fatalf("a query under the key: %d %s", r.status, r.body)
		}
		other := accepted(t, a.deploy("dep-2", changed))
		if other.Approval.ID == acc.Approval.ID {
			t.Fatal("a new key reused the approval")
		}
		if d := a.decide("deny", alice, other.Approval.ID, ""); d.status != 200 { // frees production
			t.Fatalf("deny: %d %s", d.status, d.body)
		}
		web := accepted(t, a.do("POST", "/v1/services/web/deployments", agent, "dep-3", prod))
		if web.Approval.Summary != "Deploy api@sha256:aaaa to production (web)" {
			t.Fatalf("another service's approval: %+v", web)
		}
		if n := a.effects.Load(); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		approvalUsed(t, s, acc.Approval.ID)
	})
}

func approvalUsed(t *testing.T, s ledger.Store, id string) {
	t.Helper()
	if a, err := s.GetApproval(t.Context(), id); err != nil || a.Status != ledger.ApprovalUsed || a.DecidedBy != "alice" {
		t.Fatalf("approval %+v %v", a, err)
	}
}

// TestApprovalNotRequired: a staging deploy runs at once.
func TestApprovalNotRequired(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		if r := a.deploy("stg", `{"artifact":"api@sha256:aaaa","environment":"staging"}`); r.status != 201 || a.effects.Load() != 1 {
			t.Fatalf("staging: %d %s", r.status, r.body)
		}
	})
}

// TestWhoMayDecide: the requester cannot approve its own operation even as
// an approver, nor can a principal without the role; another tenant's
// approver is told nothing exists.
func TestWhoMayDecide(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		req := "carol:acme:approver,agent"
		acc := accepted(t, a.do("POST", "/v1/services/api/deployments", req, "dep", prod))
		for _, c := range []struct {
			who, verb string
			status    int
			code      string
		}{
			{req, "approve", 403, contract.CodeForbidden},
			{"dave:acme:agent,admin", "approve", 403, contract.CodeForbidden},
			{"dave:acme:agent,admin", "deny", 403, contract.CodeForbidden},
			{"eve:globex:approver", "approve", 404, contract.CodeNotFound},
		} {
			fp := "sha256:" + strings.Repeat("0", 64)
			if c.who == req || c.who == "dave:acme:agent,admin" {
				fp = "" // they may read it
			}
			r := a.decide(c.verb, c.who, acc.Approval.ID, fp)
			if r.status != c.status || problemCode(t, r) != c.code {
				t.Fatalf("%s %s: %d %s", c.who, c.verb, r.status, r.body)
			}
		}
		if r := a.do("GET", "/_idem/v1/approvals/"+acc.Approval.ID, "eve:globex:approver", "", ""); r.status != 404 {
			t.Fatalf("another tenant reads the approval: %d", r.status)
		}
		if r := a.do("GET", "/_idem/v1/approvals?status=pending", "eve:globex:approver", "", ""); !strings.Contains(r.body, `"approvals":[]`) {
			t.Fatalf("another tenant lists: %s", r.body)
		}
		if r := a.decide("approve", alice, acc.Approval.ID, ""); r.status != 200 {
			t.Fatalf("alice: %d %s", r.status, r.body)
		}
	})
}

// TestBadDecisions: an unknown approval, a malformed or missing
// fingerprint, another request's fingerprint, a decision on an approval
// no longer pending: each refused, nothing changed.
func TestBadDecisions(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		acc := accepted(t, a.deploy("dep", prod))
		id := acc.Approval.ID
		post := func(path, body string) reply {
			return a.do("POST", "/_idem/v1/approvals/"+path, alice, "", body)
		}
		for _, c := range []struct {
			name, path, body string
			status           int
			code             string
		}{
			{"unknown approval", "apr_01NOPE/approve", `{"fingerprint":"sha256:` + strings.Repeat("a", 64) + `"}`, 404, contract.CodeNotFound},
			{"malformed fingerprint", id + "/approve", `{"fingerprint":"sha256:xyz"}`, 422, contract.CodeInvalidCommand},
			{"missing fingerprint", id + "/approve", `{"note":"ok"}`, 422, contract.CodeInvalidCommand},
			{"unknown member", id + "/approve", `{"fingerprint":"x","approved":true}`, 422, contract.CodeInvalidCommand},
			{"not JSON", id + "/deny", `approve please`, 422, contract.CodeInvalidCommand},
			{"another request", id + "/approve", `{"fingerprint":"sha256:` + strings.Repeat("b", 64) + `"}`, 409, contract.CodeApprovalMismatch},
		} {
			if r := post(c.path, c.body); r.status != c.status || problemCode(t, r) != c.code {
				t.Fatalf("%s: %d %s", c.name, r.status, r.body)
			}
		}
		if r := a.do("GET", "/_idem/v1/approvals?status=maybe", alice, "", ""); r.status != 422 {
			t.Fatalf("bad status filter: %d", r.status)
		}
		if r := a.decide("approve", alice, id, ""); r.status != 200 {
			t.Fatalf("approve: %d %s", r.status, r.body)
		}
		for _, verb := range []string{"approve", "deny"} {
			if r := a.decide(verb, "bob:acme:approver", id, ""); r.status != 409 || problemCode(t, r) != contract.CodeApprovalClosed {
				t.Fatalf("%s of a decided approval: %d %s", verb, r.status, r.body)
			}
		}
	})
}

// TestDenied: a denial is replayed as 403 approval_denied, and frees the
// environment for another deployment.
func TestDenied(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		acc := accepted(t, a.deploy("dep", prod))
		if r := a.do("POST", "/v1/services/api/deployments", agent, "dep-2",
			`{"artifact":"api@sha256:cccc","environment":"production"}`); r.status != 409 ||
			problemCode(t, r) != contract.CodeConcurrencyLocked {
			t.Fatalf("production while one waits: %d %s", r.status, r.body)
		}
		if r := a.decide("deny", alice, acc.Approval.ID, ""); r.status != 200 {
			t.Fatalf("deny: %d %s", r.status, r.body)
		}
		for range 2 {
			if r := a.deploy("dep", prod); r.status != 403 || problemCode(t, r) != contract.CodeApprovalDenied {
				t.Fatalf("after denial: %d %s", r.status, r.body)
			}
		}
		accepted(t, a.do("POST", "/v1/services/api/deployments", agent, "dep-2",
			`{"artifact":"api@sha256:cccc","environment":"production"}`))
		if a.effects.Load() != 0 {
			t.Fatal("a denied deployment ran")
		}
	})
}

// TestApprovalExpired: an approval that expires before it is used is never
// used: the next identical retry opens a new one for the same operation
// (the workflow article's test 7), and that one works. The first approval
// lasts 300ms; the retries go through a second middleware on the same
// store whose approvals last an hour, so that nothing after the lapse
// rests on how soon a loaded machine runs the next step.
func TestApprovalExpired(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		cfg := prodPolicy
		cfg.TTL = 300 * time.Millisecond
		acc := accepted(t, newDeployApp(t, s, cfg).deploy("dep", prod))
		a := newDeployApp(t, s, prodPolicy)
		time.Sleep(time.Until(acc.Approval.ExpiresAt) + 20*time.Millisecond)
		if r := a.decide("approve", alice, acc.Approval.ID, ""); r.status != 409 || problemCode(t, r) != contract.CodeApprovalClosed {
			t.Fatalf("late decision: %d %s", r.status, r.body)
		}
		again := accepted(t, a.deploy("dep", prod))
		if again.Code != contract.CodeApprovalExpired || again.OperationID != acc.OperationID || again.Approval.ID == acc.Approval.ID {
			t.Fatalf("after expiry: %+v", again)
		}
		if same := accepted(t, a.deploy("dep", prod)); same.Approval.ID != again.Approval.ID || same.Code != contract.CodeApprovalRequired {
			t.Fatalf("second retry after expiry: %+v", same)
		}
		if r := a.decide("approve", alice, again.Approval.ID, ""); r.status != 200 {
			t.Fatalf("approve the new one: %d %s", r.status, r.body)
		}
		if r := a.deploy("dep", prod); r.status != 201 || a.effects.Load() != 1 {
			t.Fatalf("run: %d %s", r.status, r.body)
		}
	})
}

// TestWaitForDecision: a retry with Prefer: wait is answered by the
// decision itself: it runs once the approver approves.
func TestWaitForDecision(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		acc := accepted(t, a.deploy("dep", prod))
		done := make(chan reply, 1)
		go func() { done <- a.deploy("dep", prod, "Prefer", "wait=20") }()
		time.Sleep(100 * time.Millisecond)
		if r := a.decide("approve", alice, acc.Approval.ID, ""); r.status != 200 {
			t.Fatalf("approve: %d", r.status)
		}
		select {
		case r := <-done:
			if r.status != 201 || a.effects.Load() != 1 {
				t.Fatalf("waited retry: %d %s", r.status, r.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting retry was not woken by the decision")
		}
	})
}

// TestApprovedRetriesStorm: 50 identical retries at once right after the
// approval: one effect, and the approval used once.
func TestApprovedRetriesStorm(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		acc := accepted(t, a.deploy("dep", prod))
		if r := a.decide("approve", alice, acc.Approval.ID, ""); r.status != 200 {
			t.Fatal(r.body)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		statuses := map[int]int{}
		for range 50 {
			wg.Go(func() {
				r := a.deploy("dep", prod)
				mu.Lock()
				statuses[r.status]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if a.effects.Load() != 1 || statuses[201] == 0 || statuses[201]+statuses[409] != 50 {
			t.Fatalf("%d effects, statuses %v", a.effects.Load(), statuses)
		}
		approvalUsed(t, s, acc.Approval.ID)
	})
}

// TestPolicyFailsOnRequest: a `when` that cannot be evaluated on a request
// (a missing field) refuses it with 422, and reserves nothing.
func TestPolicyFailsOnRequest(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, approval.Config{When: `body.region == "eu"`})
		r := a.deploy("dep", prod)
		if r.status != 422 || problemCode(t, r) != contract.CodeInvalidCommand || !strings.Contains(r.body, "approval.when") {
			t.Fatalf("missing field: %d %s", r.status, r.body)
		}
		if _, err := s.GetByKey(t.Context(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "dep"}); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("reserved anyway: %v", err)
		}
	})
}

// TestApprovedRunSendsTheApprovedHeaders (issue 24, 7.7): the approval
// keeps the headers of the request that asked for it (not its tracing,
// content or key), and the retry that executes hands the handler those,
// with its own trace: a header added or changed since never reaches it.
func TestApprovedRunSendsTheApprovedHeaders(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		acc := accepted(t, a.deploy("dep-h", prod, "X-Target-Cluster", "eu-1", "Traceparent", "t1"))
		shown, err := s.GetApproval(context.Background(), acc.Approval.ID)
		if err != nil || http.Header(shown.Headers).Get("X-Target-Cluster") != "eu-1" || http.Header(shown.Headers).Get("Traceparent") != "" ||
			http.Header(shown.Headers).Get("Idempotency-Key") != "" || http.Header(shown.Headers).Get("Content-Type") != "" {
			t.Fatalf("the approval keeps %v (%v)", shown.Headers, err)
		}
		if d := a.decide("approve", alice, acc.Approval.ID, ""); d.status != 200 {
			t.Fatalf("approve: %d %s", d.status, d.body)
		}
		run := a.deploy("dep-h", prod, "X-Target-Cluster", "us-1", "X-Dry-Run", "true", "Traceparent", "t2")
		sent := *a.sent.Load()
		if run.status != 201 || sent.Get("X-Target-Cluster") != "eu-1" || sent.Values("X-Dry-Run") != nil ||
			sent.Get("Traceparent") != "t2" || sent.Get("Idempotency-Key") != "dep-h" ||
			sent.Get("Content-Type") != "application/json" {
			t.Fatalf("the approved run: %d, the handler got %v", run.status, sent)
		}
	})
}
