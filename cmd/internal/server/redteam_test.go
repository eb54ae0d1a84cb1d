package server_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/inbox/webhook"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/idp"
)

// TestReloadRemovingJWTRefusesTokens: once a reload removes auth.jwt, a
// token verified and cached under the old configuration is refused, and
// a static token still works. (A JWT's admin may not ask for the reload:
// TestReloadNeedsAnOperator.)
func TestReloadRemovingJWTRefusesTokens(t *testing.T) {
	t.Parallel()
	e, p := jwtSQLite(t, "")
	tok := sign(t, p, "k1", claims(p, nil)) // roles agent, admin
	if r := e.do("POST", "/v1/tickets", tok, `{"title":"a"}`, "Idempotency-Key", "before"); r.status != 201 {
		t.Fatalf("before: %+v", r)
	}
	e.rewrite(func(s string) string { return regexp.MustCompile(`(?m)^auth:\n  jwt: .*\n`).ReplaceAllString(s, "") })
	if err := e.g.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := e.do("POST", "/v1/tickets", tok, `{"title":"a"}`, "Idempotency-Key", "after"); r.status != 401 {
		t.Fatalf("a JWT after auth.jwt was removed: %+v", r)
	}
	if r := e.do("POST", "/v1/tickets", "agent-token", `{"title":"a"}`, "Idempotency-Key", "static"); r.status != 201 {
		t.Fatalf("a static token: %+v", r)
	}
	if n := e.up.count("/v1/tickets"); n != 2 {
		t.Fatalf("%d effects, want 2", n)
	}
}

// TestWebhookEdges: the same webhook-id with another body (signed) is a
// conflict, not a second effect; one id on two routes of two tenants is
// two operations, one each; a body over max_body is 413 with nothing
// reserved; a bearer token of another tenant beside a valid signature
// changes nothing of whose the operation is.
func TestWebhookEdges(t *testing.T) {
	t.Parallel()
	routes := `  - {match: POST /v1/policy/a, upstream: ops, max_body: 64, webhook: {scheme: standard, secret: "` + standardSecret + `", tenant: acme}}
  - {match: POST /v1/policy/b, upstream: ops, webhook: {scheme: standard, secret: "` + standardSecret + `", tenant: globex}}
`
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newEnv(t, db.Open(t), db.DSN, routes)
		a := hook{webhook.Standard, "a", standardSecret, "msg_1", `{"n":1}`}
		b := hook{webhook.Standard, "b", standardSecret, "msg_1", `{"n":1}`}
		now := time.Now()
		if r := e.deliver(a, a.id, a.body, now, "Authorization", "Bearer globex-token"); r.status != 201 {
			t.Fatalf("a: %+v", r)
		}
		if r := e.deliver(b, b.id, b.body, now); r.status != 201 || r.header.Get(contract.HeaderReplayed) != "" {
			t.Fatalf("the same id on another tenant's route: %+v", r)
		}
		if r := e.deliver(a, a.id, `{"n":2}`, now); r.status != 422 {
			t.Fatalf("the same id, another body: %d %s", r.status, r.body)
		}
		big := `{"pad":"` + strings.Repeat("x", 100) + `"}`
		if r := e.deliver(a, "msg_big", big, now); r.status != 413 {
			t.Fatalf("over max_body: %d %s", r.status, r.body)
		}
		if n, m := e.up.count(a.path()), e.up.count(b.path()); n != 1 || m != 1 {
			t.Fatalf("%d and %d effects, want 1 and 1", n, m)
		}
		ops := e.operations()
		if len(ops) != 2 {
			t.Fatalf("%d operations, want 2", len(ops))
		}
		for _, op := range ops {
			want := map[string]string{"POST /v1/policy/a": "acme", "POST /v1/policy/b": "globex"}[op.Route]
			if op.Tenant != want || op.Principal != "webhook:/v1/policy/"+op.Route[len("POST /v1/policy/"):] {
				t.Fatalf("operation %+v", op)
			}
		}
	})
}

// TestZeroLeeway: leeway: 0s, written, is no leeway (not the default
// 30s): a token a second past its exp is refused, and reserves nothing.
func TestZeroLeeway(t *testing.T) {
	t.Parallel()
	e, p := jwtSQLite(t, ", leeway: 0s")
	late := sign(t, p, "k1", claims(p, map[string]any{"exp": time.Now().Add(-time.Second).Unix()}))
	if r := e.do("POST", "/v1/tickets", late, `{"title":"a"}`, "Idempotency-Key", "late"); r.status != 401 {
		t.Fatalf("a token past its exp, leeway 0s: %+v", r)
	}
	if len(e.operations()) != 0 || e.up.count("/v1/tickets") != 0 {
		t.Fatal("reserved or forwarded")
	}
}

// TestSignedButUnusableWebhooks: a delivery whose signature is good but
// whose body is not JSON, or (stripe) without its /id, is refused
// with nothing reserved or forwarded; the sender is told why.
func TestSignedButUnusableWebhooks(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, webhookRoutes)
	now := time.Now()
	for _, h := range hooks("unusable") {
		// (An empty body, signed, is a keyed POST without a body, as on
		// any route; stripe's has no /id.)
		bodies := []string{"not json", `{"id":`}
		if h.scheme == webhook.Stripe {
			bodies = append(bodies, "", `{"object":"event"}`, `{"id":""}`, `{"id":{"x":1}}`)
		}
		for i, body := range bodies {
			r := e.deliver(h, fmt.Sprint(h.id, "-", i), body, now)
			if r.status < 400 || r.status >= 500 {
				t.Errorf("%s, body %q: %d %s", h.route, body, r.status, r.body)
			}
		}
		if n := e.up.count(h.path()); n != 0 {
			t.Errorf("%s: %d effects", h.route, n)
		}
	}
	if ops := e.operations(); len(ops) != 0 {
		t.Fatalf("%d operations reserved, the first %+v", len(ops), ops[0])
	}
}

// TestKidlessToken: a token without a kid is verified against every key
// of the JWKS (the second of two here), and one signed by no key of it is
// refused, without a fetch per token.
func TestKidlessToken(t *testing.T) {
	t.Parallel()
	e, p := jwtSQLite(t, ", min_refresh: 1h")
	k2, err := p.AddKey("k2")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := idp.SignWith(k2, "", claims(p, nil))
	if r := e.do("POST", "/v1/tickets", tok, `{"title":"a"}`, "Idempotency-Key", "kidless"); r.status != 201 {
		t.Fatalf("a kid-less token of a published key: %+v", r)
	}
	stranger, _ := idp.NewKey()
	for i := range 5 {
		forged, _ := idp.SignWith(stranger, "", claims(p, map[string]any{"jti": i}))
		if r := e.do("POST", "/v1/tickets", forged, `{}`, "Idempotency-Key", fmt.Sprint("forged-", i)); r.status != 401 {
			t.Fatalf("a kid-less token of no published key: %+v", r)
		}
	}
	if n := p.Fetches(); n != 1 {
		t.Fatalf("%d fetches", n)
	}
	if e.up.count("/v1/tickets") != 1 {
		t.Fatalf("%d effects", e.up.count("/v1/tickets"))
	}
}
