package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/internal/dbtest"
)

// structUpstream deploys as a Go service does: it decodes the body into
// a struct with encoding/json, which matches member names without regard
// to case and keeps the last.
type structUpstream struct {
	mu      sync.Mutex
	deploys []string // the environments deployed to
}

func (u *structUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var d struct {
		Environment string `json:"environment"`
		Artifact    string `json:"artifact"`
	}
	if err := json.NewDecoder(r.Body).Decode(&d); err != nil {
		w.WriteHeader(400)
		return
	}
	u.mu.Lock()
	u.deploys = append(u.deploys, d.Environment)
	u.mu.Unlock()
	w.WriteHeader(201)
	fmt.Fprintf(w, `{"environment":%q}`, d.Environment)
}

func (u *structUpstream) seen() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.deploys, ",")
}

// TestCaseVariantMembersNeverBypassAnApproval (issue 24, 7.2): `when`
// reads "environment", the upstream's decoder reads the last of
// "environment" and "Environment". Two names a case-insensitive decoder
// takes for one are refused, 422 invalid_command naming the second, and
// nothing is reserved or forwarded; in a form body too.
func TestCaseVariantMembersNeverBypassAnApproval(t *testing.T) {
	routes := `  - match: POST /v1/deploys
    upstream: bare
    approval: {when: 'body.environment == "production"', ttl: 1m, approvers: [admin], summary: 'Deploy'}
`
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		up := &structUpstream{}
		e := newEnvWith(t, db.Open(t), db.DSN, routes, up)
		for key, body := range map[string]string{
			"k-json":  `{"environment":"staging","Environment":"production","artifact":"svc@1"}`,
			"k-upper": `{"environment":"staging","artifact":"svc@1","ENVIRONMENT":"production"}`,
		} {
			r := e.do("POST", "/v1/deploys", "agent-token", body, "Idempotency-Key", key)
			if r.status != 422 || code(r) != "invalid_command" || !strings.Contains(r.body, "path /E") {
				t.Errorf("%s: %d %s", body, r.status, r.body)
			}
		}
		form := e.do("POST", "/v1/deploys", "agent-token", "environment=staging&Environment=production",
			"Idempotency-Key", "k-form", "Content-Type", "application/x-www-form-urlencoded")
		if form.status != 422 || code(form) != "invalid_command" || !strings.Contains(form.body, "path /Environment") {
			t.Errorf("a form: %d %s", form.status, form.body)
		}
		if got := up.seen(); got != "" || len(e.operations()) != 0 {
			t.Fatalf("deployed to %q; %d operations reserved", got, len(e.operations()))
		}
		// The route itself works: production waits, staging runs.
		if r := e.do("POST", "/v1/deploys", "agent-token", `{"environment":"production"}`, "Idempotency-Key", "p"); r.status != 202 {
			t.Fatalf("production: %d %s", r.status, r.body)
		}
		if r := e.do("POST", "/v1/deploys", "agent-token", `{"environment":"staging"}`, "Idempotency-Key", "s"); r.status != 201 ||
			up.seen() != "staging" {
			t.Fatalf("staging: %d %s, deployed to %q", r.status, r.body, up.seen())
		}
	})
}
