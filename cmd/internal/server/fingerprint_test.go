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

// bindingRoutes are the routes of the fingerprint tests: a path parameter,
// query parameters (one ignored), a form-encoded API and an opaque body.
const bindingRoutes = `  - {match: "POST /v1/policy/{name}", upstream: ops}
  - {match: POST /v1/policy/utm, upstream: ops, fingerprint: {ignore_query: [utm_source]}}
  - {match: POST /v1/policy/blob, upstream: ops, body: opaque}
`

// TestFingerprintCoversWhatTheRequestDoes: a key reused on another target
// (intent 2 instead of 1) or with another query (a dry run, then the real
// thing) is refused, and the second request never reaches the upstream as
// a replay of the first. An ignored query parameter changes nothing.
func TestFingerprintCoversWhatTheRequestDoes(t *testing.T) {
	t.Parallel()
	forEachStoreRoutes(t, bindingRoutes, func(t *testing.T, e *env) {
		if r := e.do("POST", "/v1/policy/1", "agent-token", `{}`, "Idempotency-Key", "cap-K"); r.status != 201 {
			t.Fatalf("capture 1: %+v", r)
		}
		r := e.do("POST", "/v1/policy/2", "agent-token", `{}`, "Idempotency-Key", "cap-K")
		if r.status != 422 || code(r) != "fingerprint_mismatch" {
			t.Fatalf("capture 2 under capture 1's key: %+v", r)
		}
		if e.up.count("/v1/policy/1") != 1 || e.up.count("/v1/policy/2") != 0 {
			t.Fatalf("effects: 1=%d 2=%d", e.up.count("/v1/policy/1"), e.up.count("/v1/policy/2"))
		}
		if r := e.do("POST", "/v1/policy/q?dry_run=true", "agent-token", `{}`, "Idempotency-Key", "dry"); r.status != 201 {
			t.Fatalf("dry run: %+v", r)
		}
		if r := e.do("POST", "/v1/policy/q", "agent-token", `{}`, "Idempotency-Key", "dry"); r.status != 422 {
			t.Fatalf("the real request under the dry run's key: %+v", r)
		}
		if r := e.do("POST", "/v1/policy/q?a=1&a=2", "agent-token", `{}`, "Idempotency-Key", "order"); r.status != 201 {
			t.Fatalf("a=1&a=2: %+v", r)
		}
		if r := e.do("POST", "/v1/policy/q?a=2&a=1", "agent-token", `{}`, "Idempotency-Key", "order"); r.status != 422 {
			t.Fatalf("a=2&a=1 under a=1&a=2's key: %+v", r)
		}
		a := e.do("POST", "/v1/policy/utm?utm_source=mail&x=1", "agent-token", `{}`, "Idempotency-Key", "utm")
		b := e.do("POST", "/v1/policy/utm?x=1&utm_source=web", "agent-token", `{}`, "Idempotency-Key", "utm")
		if a.status != 201 || b.header.Get("Idempotent-Replayed") != "true" || e.up.count("/v1/policy/utm") != 1 {
			t.Fatalf("an ignored query parameter: %+v %+v", a, b)
		}
		if r := e.do("POST", "/v1/policy/q?%zz", "agent-token", `{}`, "Idempotency-Key", "bad"); r.status != 400 ||
			code(r) != "invalid_request" {
			t.Fatalf("a query that does not parse: %+v", r)
		}
	})
}

// TestBodiesByMediaType: form bodies (Stripe's SDK sends its POSTs that
// way) are fingerprinted as name → values; other types are 415, nothing
// reserved, unless the route is opaque; numbers that a double would round
// are refused with their JSON Pointer.
func TestBodiesByMediaType(t *testing.T) {
	t.Parallel()
	forEachStoreRoutes(t, bindingRoutes, func(t *testing.T, e *env) {
		form := func(key, body string) reply {
			return e.do("POST", "/v1/policy/charges", "agent-token", body, "Idempotency-Key", key,
				"Content-Type", "application/x-www-form-urlencoded")
		}
		first := form("f", "amount=100&currency=eur&metadata[order]=42")
		again := form("f", "currency=eur&metadata[order]=42&amount=100")
		changed := form("f", "amount=101&currency=eur&metadata[order]=42")
		if first.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || changed.status != 422 {
			t.Fatalf("form: %+v / %+v / %+v", first, again, changed)
		}
		for _, ct := range []string{"text/plain", "application/xml", ""} {
			r := e.do("POST", "/v1/policy/charges", "agent-token", "amount=1", "Idempotency-Key", "t-"+ct, "Content-Type", ct)
			if r.status != 415 || code(r) != "unsupported_media_type" {
				t.Fatalf("Content-Type %q: %+v", ct, r)
			}
		}
		blob := func(key, body string) reply {
			return e.do("POST", "/v1/policy/blob", "agent-token", body, "Idempotency-Key", key, "Content-Type", "text/csv")
		}
		if a, b, c := blob("b", "a,b\n1,2\n"), blob("b", "a,b\n1,2\n"), blob("b", "a,b\n1,3\n"); a.status != 201 ||
			b.header.Get("Idempotent-Replayed") != "true" || c.status != 422 {
			t.Fatalf("opaque: %+v / %+v / %+v", a, b, c)
		}
		r := e.do("POST", "/v1/policy/amounts", "agent-token", `{"amount":9007199254740993}`, "Idempotency-Key", "n")
		if r.status != 422 || code(r) != "invalid_command" || !strings.Contains(r.body, "/amount") {
			t.Fatalf("an amount a double would round: %+v", r)
		}
		if r := e.do("POST", "/v1/policy/amounts", "agent-token", `{"amount":1.23e17}`, "Idempotency-Key", "n2"); r.status != 201 {
			t.Fatalf("an amount a double holds exactly: %+v", r)
		}
		if n := e.up.count("/v1/policy/charges") + e.up.count("/v1/policy/amounts"); n != 2 {
			t.Fatalf("%d effects, want 2 (one charge, one exact amount)", n)
		}
	})
}

// forEachStoreRoutes is forEachStore with routes added to the configuration.
func forEachStoreRoutes(t *testing.T, routes string, test func(t *testing.T, e *env)) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		test(t, newEnv(t, db.Open(t), db.DSN, routes))
	})
}

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
