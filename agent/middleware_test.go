package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// principalHeaders names the caller to the middleware (X-Principal,
// X-Tenant, X-Roles, as httpidem's own tests do), and records the Prefer
// of each write it sends.
type principalHeaders struct {
	who     string // name:tenant:roles
	mu      sync.Mutex
	prefers []string
}

func (p *principalHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	name, rest, _ := strings.Cut(p.who, ":")
	tenant, roles, _ := strings.Cut(rest, ":")
	r.Header.Set("X-Principal", name)
	r.Header.Set("X-Tenant", tenant)
	r.Header.Set("X-Roles", roles)
	if r.Method == "POST" && !strings.HasPrefix(r.URL.Path, "/_idem/") {
		p.mu.Lock()
		p.prefers = append(p.prefers, r.Header.Get("Prefer"))
		p.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// approvalMiddleware is the real httpidem middleware on a SQLite ledger in
// front of a counting deployments handler, production deployments needing
// an approver, with the approvals API and an operation lookup by key as
// the gateway's control API renders it.
func approvalMiddleware(t *testing.T) (url string, effects *atomic.Int64) {
	t.Helper()
	s := dbtest.SQLite(t)
	pol, err := approval.Compile(approval.Config{When: `body.environment == "production"`, TTL: time.Hour,
		Summary: `Deploy {{.body.artifact}} to {{.body.environment}} ({{.params.service}})`})
	if err != nil {
		t.Fatal(err)
	}
	principal := func(r *http.Request) (approval.Principal, error) {
		p := approval.Principal{Name: r.Header.Get("X-Principal"), Tenant: r.Header.Get("X-Tenant"),
			Roles: strings.Split(r.Header.Get("X-Roles"), ",")}
		if p.Name == "" || p.Tenant == "" {
			return p, errors.New("no principal")
		}
		return p, nil
	}
	m, err := httpidem.New(httpidem.Options{Store: s, StatusBase: "/_idem/v1", Principal: principal,
		Tenant: func(r *http.Request) (string, error) { p, err := principal(r); return p.Tenant, err },
		Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/services/{service}/deployments", Approval: pol}}})
	if err != nil {
		t.Fatal(err)
	}
	effects = new(atomic.Int64)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/services/{service}/deployments", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"deployment":"D-%d"}`, effects.Add(1))
	})
	// The operations and approvals are the control plane's, mounted beside
	// the service's handlers.
	api, err := control.New(control.Options{Operator: &control.Operator{Store: s, Wake: m.Changed},
		Caller: func(r *http.Request) (approval.Principal, bool) { p, err := principal(r); return p, err == nil }})
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/_idem/v1/", api)
	srv := httptest.NewServer(m.Handler(mux))
	t.Cleanup(srv.Close)
	return srv.URL, effects
}

// approverDecides has an approver approve or deny the one pending approval.
func approverDecides(t *testing.T, url, verb string) {
	hc := &http.Client{Transport: &principalHeaders{who: "alice:acme:approver"}}
	resp, err := hc.Get(url + "/_idem/v1/approvals?status=pending")
	if err != nil {
		t.Error(err)
		return
	}
	var l contract.ApprovalListView
	json.NewDecoder(resp.Body).Decode(&l)
	resp.Body.Close()
	if len(l.Approvals) != 1 {
		t.Errorf("pending approvals: %+v", l)
		return
	}
	a := l.Approvals[0]
	resp, err = hc.Post(url+"/_idem/v1/approvals/"+a.ID+"/"+verb, "application/json",
		strings.NewReader(fmt.Sprintf(`{"fingerprint":%q,"note":"test"}`, a.Fingerprint)))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("%s: %v %v", verb, resp, err)
		return
	}
	resp.Body.Close()
}

// Against the real middleware: without an approval wait the 202 comes at
// once (no Prefer: wait, which the gateway would hold for the decision);
// with one, the waiting request is held and runs once approved, exactly
// once, or ends failed once denied; a resume then replays.
func TestApprovalAgainstTheMiddleware(t *testing.T) {
	for verb, want := range map[string]struct {
		kind    Kind
		status  int
		effects int64
		resumed Kind
	}{"approve": {Created, 201, 1, Replayed}, "deny": {Failed, 403, 0, Failed}} {
		t.Run(verb, func(t *testing.T) {
			url, effects := approvalMiddleware(t)
			j, err := OpenJournal(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { j.Close() })
			tr := &principalHeaders{who: "bot:acme:agent"}
			c := &Client{BaseURL: url, Token: "t", Journal: j, HTTP: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
			ctx := context.Background()
			out, err := c.Do(ctx, deploy)
			if err != nil || out.Kind != NeedsApproval || out.Approval == nil || out.Approval.Status != ledger.ApprovalPending ||
				out.Approval.Summary != "Deploy web-1.4.2 to production (web)" || out.Approval.ExpiresAt.IsZero() ||
				!strings.HasPrefix(out.Approval.URL, "/_idem/v1/approvals/apr_") {
				t.Fatalf("no wait: %+v %v", out, err)
			}
			c.Policy.ApprovalWait = 20 * time.Second
			go func() { time.Sleep(200 * time.Millisecond); approverDecides(t, url, verb) }()
			out, err = c.Do(ctx, deploy)
			if err != nil || out.Kind != want.kind || out.Status != want.status || effects.Load() != want.effects {
				t.Fatalf("waited: %+v %v, %d effects", out, err, effects.Load())
			}
			if out, _ = c.Do(ctx, deploy); out.Kind != want.resumed || effects.Load() != want.effects {
				t.Fatalf("resume: %+v, %d effects", out, effects.Load())
			}
			// The write, then the one that waited (half the 30s timeout),
			// then the resume's; and every one under the intent's key.
			tr.mu.Lock()
			defer tr.mu.Unlock()
			if fmt.Sprint(tr.prefers) != "[ wait=15 ]" {
				t.Fatalf("Prefer of each write: %q", tr.prefers)
			}
			if e, _ := j.Latest(ctx, deploy.Intent); e.Version != 1 || e.Key != out.Key || e.Attempts != 3 {
				t.Fatalf("journal %+v", e)
			}
		})
	}
}
