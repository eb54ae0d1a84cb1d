package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/inbox/webhook"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// The webhook routes of these tests, one per scheme, on the counting
// upstream (POST /v1/policy/{name} counts its effects by path). Stripe's
// lists two secrets, as during a rotation.
const (
	standardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stripeSecret   = "whsec_stripe_new"
	stripeOld      = "whsec_stripe_old"
	githubSecret   = "It's a Secret to Everybody"
	// An ed25519 key pair (Standard Webhooks' v1a): the sender's seed and
	// the public key the route holds.
	senderKey     = "whsk_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="
	receiverKey   = "whpk_ebVWLo/mVPlAeLES6KmLp5AfhTrmlb7X4OORC60ElmQ="
	webhookRoutes = `  - {match: POST /v1/policy/standard, upstream: ops, webhook: {scheme: standard, secret: "` + standardSecret + `", tenant: acme}}
  - {match: POST /v1/policy/stripe, upstream: ops, webhook: {scheme: stripe, secret: ["` + stripeSecret + `", "` + stripeOld + `"], tenant: acme, tolerance: 5m}}
  - {match: POST /v1/policy/github, upstream: ops, webhook: {scheme: github, secret: "` + githubSecret + `", tenant: acme}}
  - {match: POST /v1/policy/ed25519, upstream: ops, webhook: {scheme: standard, secret: "` + receiverKey + `", tenant: acme}}
`
)

// hook is one scheme's delivery: its route, the sender's secret, id and
// body.
type hook struct {
	scheme, route, secret, id, body string
}

func hooks(run string) []hook {
	return []hook{
		{webhook.Standard, "standard", standardSecret, "msg_" + run, `{"type":"invoice.paid","data":{"n":1}}`},
		{webhook.Stripe, "stripe", stripeSecret, "evt_" + run, `{"id":"evt_` + run + `","object":"event","type":"charge.succeeded"}`},
		{webhook.GitHub, "github", githubSecret, "72d3162e-" + run, `{"action":"opened","number":` + fmt.Sprint(len(run)) + `}`},
		{webhook.Standard, "ed25519", senderKey, "msg_a_" + run, `{"type":"invoice.paid","data":{"n":2}}`},
	}
}

func (h hook) path() string { return "/v1/policy/" + h.route }

// deliver posts body to h's route signed at at, under id, and with the
// extra headers (pairs), as the sender does.
func (e *env) deliver(h hook, id, body string, at time.Time, extra ...string) reply {
	e.t.Helper()
	signed, err := webhook.Sign(h.scheme, h.secret, id, at, []byte(body))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.deliverWith(h.path(), body, signed, extra...)
}

func (e *env) deliverWith(path, body string, signed http.Header, extra ...string) reply {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.gw.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range signed {
		req.Header[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Set(extra[i], extra[i+1])
	}
	return roundTrip(e.t, req)
}

// TestWebhookDeliveredOnceAndReplayed: each scheme's signed delivery
// makes one effect, an operation of the route's tenant under its signed
// key, kept a week; its redelivery, re-signed later as senders do (a new
// timestamp, so a new signature), gets the stored 201 with
// Idempotent-Replayed, and the upstream sees it once. GitHub's same
// signed body under a new delivery id is the same operation (its body's
// digest is its business key). A Stripe route with two secrets (a
// rotation) takes either's signature.
func TestWebhookDeliveredOnceAndReplayed(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newEnv(t, db.Open(t), db.DSN, webhookRoutes)
		for _, h := range hooks(fmt.Sprint(time.Now().UnixNano())) {
			now := time.Now()
			first := e.deliver(h, h.id, h.body, now)
			if first.status != 201 || e.up.count(h.path()) != 1 {
				t.Fatalf("%s: %d %s, %d effects", h.scheme, first.status, first.body, e.up.count(h.path()))
			}
			again := e.deliver(h, h.id, h.body, now.Add(2*time.Second))
			if again.status != 201 || again.body != first.body || again.header.Get(contract.HeaderReplayed) != "true" {
				t.Fatalf("%s: redelivery answered %d %q %v", h.scheme, again.status, again.body, again.header)
			}
			if h.scheme == webhook.GitHub {
				other := e.deliver(h, h.id+"-redelivered", h.body, now)
				if other.status != 201 || other.body != first.body || other.header.Get(contract.HeaderDuplicateOf) == "" {
					t.Fatalf("github: the same body under a new delivery id: %d %q %v", other.status, other.body, other.header)
				}
			}
			if n := e.up.count(h.path()); n != 1 {
				t.Fatalf("%s: %d effects for one event", h.scheme, n)
			}
			wantOperation(t, e, h)
		}
		// A rotation: a new event signed with the old secret is accepted,
		// and its redelivery under both signatures replays.
		rotated := hook{webhook.Stripe, "stripe", stripeOld, "evt_rotated", `{"id":"evt_rotated","object":"event"}`}
		now := time.Now()
		if r := e.deliver(rotated, rotated.id, rotated.body, now); r.status != 201 || e.up.count(rotated.path()) != 2 {
			t.Fatalf("signed with the old secret: %d %s", r.status, r.body)
		}
		old, _ := webhook.Sign(webhook.Stripe, stripeOld, "", now, []byte(rotated.body))
		both, _ := webhook.Sign(webhook.Stripe, stripeSecret, "", now, []byte(rotated.body))
		both.Set("Stripe-Signature", both.Get("Stripe-Signature")+","+strings.Split(old.Get("Stripe-Signature"), ",")[1])
		if r := e.deliverWith(rotated.path(), rotated.body, both); r.status != 201 || r.header.Get(contract.HeaderReplayed) != "true" ||
			e.up.count(rotated.path()) != 2 {
			t.Fatalf("two v1 signatures: %d %s, %d effects", r.status, r.body, e.up.count(rotated.path()))
		}
	})
}

// wantOperation: h's one operation is the route tenant's, under h's key,
// reserved by the route's principal, of kind webhook in the route's own
// namespace, remembered at least a week.
func wantOperation(t *testing.T, e *env, h hook) {
	t.Helper()
	var mine []*ledger.Operation
	for _, op := range e.operations() {
		if op.Route == "POST "+h.path() {
			mine = append(mine, op)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("%s: %d operations", h.scheme, len(mine))
	}
	op := mine[0]
	if op.Tenant != "acme" || op.Key != h.id || op.Principal != "webhook:"+h.path() || op.State != ledger.Succeeded ||
		op.Kind != ledger.KindWebhook || op.Namespace != ledger.WebhookNamespace(h.path()) {
		t.Fatalf("%s: operation %+v", h.scheme, op)
	}
	if time.Until(op.ExpiresAt) < 7*24*time.Hour-time.Minute {
		t.Fatalf("%s: remembered until %v only", h.scheme, op.ExpiresAt)
	}
}

// TestWebhookRefusalsReserveNothing: a bad signature, a stale timestamp,
// a body swapped under a valid signature, missing headers, and an agent's
// bearer token instead of a signature, are each 401 on every scheme, with
// nothing reserved (the ledger holds no operation) and nothing forwarded.
func TestWebhookRefusalsReserveNothing(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newEnv(t, db.Open(t), db.DSN, webhookRoutes)
		for _, h := range hooks("refused") {
			for name, send := range refusals(e, h) {
				r := send()
				if r.status != 401 || code(r) != contract.CodeUnauthorized {
					t.Errorf("%s, %s: %d %s", h.scheme, name, r.status, r.body)
				}
			}
			if n := e.up.count(h.path()); n != 0 {
				t.Errorf("%s: %d effects from refused deliveries", h.scheme, n)
			}
		}
		if ops := e.operations(); len(ops) != 0 {
			t.Fatalf("refused deliveries reserved %d operations: %+v", len(ops), ops[0])
		}
		r := e.do("GET", "/_idem/v1/operations", "alice-token", "")
		if r.status != 200 || strings.Contains(r.body, "refused") {
			t.Fatalf("the control API: %d %s", r.status, r.body)
		}
	})
}

// refusals are the deliveries that must each be refused, by name.
func refusals(e *env, h hook) map[string]func() reply {
	now := time.Now()
	wrong := hook{h.scheme, h.route, h.secret + "x", h.id, h.body}
	switch {
	case h.secret == senderKey:
		wrong.secret = "whsk_" + strings.Repeat("A", 43) + "="
	case h.scheme == webhook.Standard:
		wrong.secret = "whsec_c2Vjb25kIHNlY3JldCBvZiAyNCBieXRlcw=="
	}
	out := map[string]func() reply{
		"bad signature": func() reply { return e.deliver(wrong, h.id, h.body, now) },
		"swapped body": func() reply {
			signed, _ := webhook.Sign(h.scheme, h.secret, h.id, now, []byte(h.body))
			return e.deliverWith(h.path(), strings.Replace(h.body, "e", "E", 1), signed)
		},
		"no headers": func() reply { return e.deliverWith(h.path(), h.body, nil) },
		"a bearer token instead": func() reply {
			return e.deliverWith(h.path(), h.body, http.Header{"Authorization": {"Bearer agent-token"}})
		},
	}
	if h.scheme != webhook.GitHub {
		out["stale timestamp"] = func() reply { return e.deliver(h, h.id, h.body, now.Add(-6*time.Minute)) }
		out["from the future"] = func() reply { return e.deliver(h, h.id, h.body, now.Add(6*time.Minute)) }
	}
	for _, name := range missingHeaders[h.scheme] {
		out["without "+name] = func() reply {
			signed, _ := webhook.Sign(h.scheme, h.secret, h.id, now, []byte(h.body))
			signed.Del(name)
			return e.deliverWith(h.path(), h.body, signed)
		}
	}
	return out
}

var missingHeaders = map[string][]string{
	webhook.Standard: {"webhook-id", "webhook-timestamp", "webhook-signature"},
	webhook.Stripe:   {"Stripe-Signature"},
	webhook.GitHub:   {"X-Hub-Signature-256", "X-GitHub-Delivery"},
}

// TestWebhookTransientFailureIsDeliveredAgain: on a webhook route, the
// receiver's 502 or 503 means not applied by default (senders retry for
// days): the sender's retry is delivered, and made once, instead of 409
// until an operator acts. A 500 may come after the receiver acted: it
// stays unknown, and its retries are told so, nothing sent again.
func TestWebhookTransientFailureIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		e := newEnv(t, db.Open(t), db.DSN, webhookRoutes)
		h := hooks("transient-" + fmt.Sprint(time.Now().UnixNano()))[0]
		now := time.Now()
		if r := e.deliver(h, h.id, h.body, now, "X-Status", "503"); r.status != 503 {
			t.Fatalf("the receiver's 503: %d %s", r.status, r.body)
		}
		again := e.deliver(h, h.id, h.body, now.Add(time.Second))
		if again.status != 201 || again.header.Get(contract.HeaderReplayed) == "true" {
			t.Fatalf("the sender's retry after a 503: %d %s", again.status, again.body)
		}
		u := hooks("unknown-" + fmt.Sprint(time.Now().UnixNano()))[0]
		if r := e.deliver(u, u.id, u.body, now, "X-Status", "500"); r.status != 500 {
			t.Fatalf("the receiver's 500: %d %s", r.status, r.body)
		}
		calls := e.up.count(u.path())
		if r := e.deliver(u, u.id, u.body, now.Add(time.Second)); r.status != 409 || code(r) != "outcome_unknown" ||
			e.up.count(u.path()) != calls {
			t.Fatalf("the sender's retry after a 500: %d %s", r.status, r.body)
		}
	})
}

// TestReloadRemovingJWTRefusesTokens: once a reload removes auth.jwt, a

// token verified and cached under the old configuration is refused, and

// a static token still works. (A JWT's admin may not ask for the reload:

// TestReloadNeedsAnOperator.)

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
