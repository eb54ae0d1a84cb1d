package server_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/idp"
	"github.com/idemgate/idemgate/ledger"
)

// jwtEnv is a gateway with auth.jwt trusting p (its tenant in the claim
// org, its roles in realm_access.roles), with settings added to the
// section, beside the test configuration's static principals.
func jwtEnv(t *testing.T, db dbtest.DB, p *idp.IDP, settings string) *env {
	t.Helper()
	auth := fmt.Sprintf(`auth:
  jwt: {issuer: %q, audience: idemgate, jwks_url: %q, tenant_claim: org, roles_claim: realm_access.roles%s}
`, p.Issuer, p.JWKSURL, settings)
	return newEnv(t, db.Open(t), db.DSN, auth)
}

// jwtClocked is jwtEnv on SQLite whose JWT checks read clock, with its
// identity provider.
func jwtClocked(t *testing.T, settings string, clock *testClock) (*env, *idp.IDP) {
	t.Helper()
	p := startIDP(t)
	auth := fmt.Sprintf(`auth:
  jwt: {issuer: %q, audience: idemgate, jwks_url: %q, tenant_claim: org, roles_claim: realm_access.roles%s}
`, p.Issuer, p.JWKSURL, settings)
	db := dbtest.SQLiteDB(t)
	return newEnvWith(t, db.Open(t), db.DSN, auth, nil, server.WithClock(clock.Now)), p
}

// jwtSQLite is jwtEnv on SQLite, with its identity provider.
func jwtSQLite(t *testing.T, settings string) (*env, *idp.IDP) {
	t.Helper()
	p := startIDP(t)
	return jwtEnv(t, dbtest.SQLiteDB(t), p, settings), p
}

func startIDP(t *testing.T) *idp.IDP {
	t.Helper()
	p, err := idp.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// claims are a valid token's, with changes (a nil value removes a claim).
func claims(p *idp.IDP, changes map[string]any) map[string]any {
	c := map[string]any{"iss": p.Issuer, "aud": []string{"other-api", "idemgate"}, "sub": "alice", "org": "acme",
		"realm_access": map[string]any{"roles": []string{"agent", "admin"}},
		"exp":          time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for k, v := range changes {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func sign(t *testing.T, p *idp.IDP, kid string, c map[string]any) string {
	t.Helper()
	tok, err := p.Sign(kid, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestJWTPrincipals: a valid token is a principal of its tenant claim,
// with its roles (a nested claim), named jwt:<sub> so that it never is the
// static principal of the same name; static tokens work beside it; the
// same key from the same tenant replays, whoever sends it.
func TestJWTPrincipals(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		p := startIDP(t)
		e := jwtEnv(t, db, p, "")
		tok := sign(t, p, "k1", claims(p, nil))
		first := e.do("POST", "/v1/tickets", tok, `{"title":"a"}`, "Idempotency-Key", "k-1")
		again := e.do("POST", "/v1/tickets", tok, `{"title":"a"}`, "Idempotency-Key", "k-1")
		static := e.do("POST", "/v1/tickets", "agent-token", `{"title":"a"}`, "Idempotency-Key", "k-1")
		if first.status != 201 || again.header.Get("Idempotent-Replayed") != "true" ||
			static.header.Get("Idempotent-Replayed") != "true" || e.up.count("/v1/tickets") != 1 {
			t.Fatalf("first %+v again %+v static %+v, %d effects", first, again, static, e.up.count("/v1/tickets"))
		}
		op, err := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "k-1"})
		if err != nil || op.Principal != "jwt:alice" {
			t.Fatalf("operation %+v, %v", op, err)
		}
		// (the test upstream has no such path: the gateway let it through.)
		if r := e.do("POST", "/v1/admin-only", tok, `{}`, "Idempotency-Key", "k-2"); r.status == 403 ||
			r.header.Get("Idempotency-Operation") == "" {
			t.Fatalf("admin from realm_access.roles: %+v", r)
		}
		// Roles as one string, OAuth 2's scope form; no admin among them.
		agent := sign(t, p, "k1", claims(p, map[string]any{"realm_access": map[string]any{"roles": "agent reader"}}))
		if r := e.do("POST", "/v1/admin-only", agent, `{}`, "Idempotency-Key", "k-3"); r.status != 403 {
			t.Fatalf("agent on an admin route: %+v", r)
		}
		// Another tenant's claim sees nothing of acme's.
		globex := sign(t, p, "k1", claims(p, map[string]any{"org": "globex"}))
		if r := e.do("GET", "/_idem/v1/operations/"+op.ID, globex, ""); r.status != 404 {
			t.Fatalf("another tenant's token read acme's operation: %+v", r)
		}
		if r := e.do("GET", "/_idem/v1/operations/"+op.ID, tok, ""); r.status != 200 {
			t.Fatalf("its own operation: %+v", r)
		}
	})
}

// TestBadJWTsReachNothing: each token the issue lists is 401, reserves
// nothing, and never reaches the upstream; tokens with invented kids make
// no fetch of the JWKS within min_refresh.
func TestBadJWTsReachNothing(t *testing.T) {
	t.Parallel()
	// A leeway of half an hour: the skewed token below is a minute off,
	// and stays within it however slow the machine; the bad ones are hours.
	e, p := jwtSQLite(t, ", leeway: 30m, min_refresh: 1h")
	stranger, err := idp.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := idp.SignWith(stranger, "k1", claims(p, nil))
	unknownKID, _ := idp.SignWith(stranger, "k-invented", claims(p, nil))
	pub, _ := x509.MarshalPKIXPublicKey(&p.Key("k1").PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	now := time.Now()
	bad := map[string]string{
		"expired":            sign(t, p, "k1", claims(p, map[string]any{"exp": now.Add(-2 * time.Hour).Unix()})),
		"not yet valid":      sign(t, p, "k1", claims(p, map[string]any{"nbf": now.Add(2 * time.Hour).Unix()})),
		"no exp":             sign(t, p, "k1", claims(p, map[string]any{"exp": nil})),
		"wrong audience":     sign(t, p, "k1", claims(p, map[string]any{"aud": "another-api"})),
		"wrong issuer":       sign(t, p, "k1", claims(p, map[string]any{"iss": "https://evil.example"})),
		"alg none":           idp.Unsigned(claims(p, nil)),
		"HS256, public PEM":  idp.HMACWith(pubPEM, "k1", claims(p, nil)),
		"HS256, public DER":  idp.HMACWith(pub, "k1", claims(p, nil)),
		"unknown signer":     forged,
		"unknown kid":        unknownKID,
		"no tenant claim":    sign(t, p, "k1", claims(p, map[string]any{"org": nil})),
		"tenant not string":  sign(t, p, "k1", claims(p, map[string]any{"org": 7})),
		"tenant with colon":  sign(t, p, "k1", claims(p, map[string]any{"org": "acme:x"})),
		"role not string":    sign(t, p, "k1", claims(p, map[string]any{"realm_access": map[string]any{"roles": []any{1}}})),
		"tampered payload":   tamper(sign(t, p, "k1", claims(p, nil))),
		"two parts":          "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0",
		"garbage three part": "a.b.c",
	}
	for name, tok := range bad {
		r := e.do("POST", "/v1/tickets", tok, `{"title":"x"}`, "Idempotency-Key", "bad-"+name)
		if r.status != 401 || code(r) != "unauthorized" ||
			r.header.Get("WWW-Authenticate") != `Bearer realm="idemgate", error="invalid_token"` {
			t.Errorf("%s: %d %s %v", name, r.status, r.body, r.header)
		}
	}
	// Invented kids, as fast as they come: refused (past the address's
	// budget of failures, 429; the token is verified all the same), and
	// no fetch.
	for i := range 50 {
		tok, _ := idp.SignWith(stranger, fmt.Sprint("invented-", i), claims(p, nil))
		if s := e.do("POST", "/v1/tickets", tok, `{}`, "Idempotency-Key", fmt.Sprint("inv-", i)).status; s != 401 && s != 429 {
			t.Fatalf("invented kid: %d", s)
		}
	}
	if n := p.Fetches(); n != 1 {
		t.Fatalf("%d fetches of the JWKS, after 50 invented kids within min_refresh", n)
	}
	if n := len(e.operations()); n != 0 || e.up.count("/v1/tickets") != 0 {
		t.Fatalf("refused tokens made %d operations and %d effects", n, e.up.count("/v1/tickets"))
	}
	// Within the leeway, exp and nbf are forgiven.
	skewed := sign(t, p, "k1", claims(p, map[string]any{"exp": now.Add(-time.Minute).Unix(),
		"nbf": now.Add(time.Minute).Unix()}))
	if r := e.do("POST", "/v1/tickets", skewed, `{"title":"x"}`, "Idempotency-Key", "skewed"); r.status != 201 {
		t.Fatalf("a token within the leeway: %+v", r)
	}
	if strings.Contains(e.logs.String(), skewed) {
		t.Fatal("a token reached the log")
	}
}

// tamper changes a signed token's payload, keeping its signature.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	parts[1] = strings.TrimSuffix(parts[1], parts[1][len(parts[1])-2:]) + "xx"
	return strings.Join(parts, ".")
}

// TestJWKSRotation: the JWKS is fetched once, kept, and fetched again
// once when a token names a kid it does not hold (a rotation), however
// many requests bring the new kid at once.
func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	e, p := jwtClocked(t, ", min_refresh: 10s", clock)
	post := func(tok, key string) int {
		return e.do("POST", "/v1/tickets", tok, `{"title":"x"}`, "Idempotency-Key", key).status
	}
	for i := range 5 {
		if s := post(sign(t, p, "k1", claims(p, map[string]any{"jti": i})), fmt.Sprint("old-", i)); s != 201 {
			t.Fatalf("k1: %d", s)
		}
	}
	if n := p.Fetches(); n != 1 {
		t.Fatalf("%d fetches for one kid", n)
	}
	// The issuer rotates: a new key, a token signed with it.
	if _, err := p.AddKey("k2"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second) // past min_refresh
	before := p.Fetches()
	// Sixteen at once, each reading the control API (no upstream, whose
	// timeout a loaded machine could miss when they all go at once).
	var wg sync.WaitGroup
	statuses := make([]int, 16)
	for i := range statuses {
		wg.Go(func() { statuses[i] = e.read(sign(t, p, "k2", claims(p, map[string]any{"jti": i}))).status })
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 200 {
			t.Fatalf("k2 token %d: %d", i, s)
		}
	}
	if n := p.Fetches() - before; n != 1 {
		t.Fatalf("%d fetches for the new kid", n)
	}
	if s := post(sign(t, p, "k2", claims(p, nil)), "new"); s != 201 || e.up.count("/v1/tickets") != 6 {
		t.Fatalf("a write with k2: %d, %d effects, want 6", s, e.up.count("/v1/tickets"))
	}
}

// TestVerifiedTokenCachedForItsLifetime: a verified token is served
// without the issuer (the JWKS server gone), and not past its exp; a web
// page's session made from it ends with it.
func TestVerifiedTokenCachedForItsLifetime(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	e, p := jwtClocked(t, ", leeway: 1ms", clock)
	exp := clock.Now().Add(time.Minute).Truncate(time.Second)
	tok := sign(t, p, "k1", claims(p, map[string]any{"exp": exp.Unix()}))
	if r := e.do("GET", "/_idem/v1/operations", tok, ""); r.status != 200 {
		t.Fatalf("valid: %+v", r)
	}
	browser := clientFrom("127.0.0.1")
	if status, path := signIn(t, browser, e.gw.URL, tok); status != 200 || path == "/ui/signin" {
		t.Fatalf("sign-in: %d at %s", status, path)
	}
	p.Close()
	if r := e.do("GET", "/_idem/v1/operations", tok, ""); r.status != 200 {
		t.Fatalf("cached, the issuer gone: %+v", r)
	}
	clock.Advance(exp.Sub(clock.Now()) + 50*time.Millisecond)
	if r := e.do("GET", "/_idem/v1/operations", tok, ""); r.status != 401 {
		t.Fatalf("past its exp: %+v", r)
	}
	resp, err := browser.Get(e.gw.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/ui/signin" {
		t.Fatalf("the web page's session outlived its token: %s", resp.Request.URL.Path)
	}
}

// TestWebPageSignsInWithAJWT: the web page's sign-in takes a JWT as it
// takes a static token, and refuses a bad one.
func TestWebPageSignsInWithAJWT(t *testing.T) {
	t.Parallel()
	e, p := jwtSQLite(t, "")
	tok := sign(t, p, "k1", claims(p, nil))
	if status, path := signIn(t, clientFrom("127.0.0.1"), e.gw.URL, tok); status != http.StatusOK ||
		!strings.HasPrefix(path, "/ui/") {
		t.Fatalf("sign-in with a JWT: %d at %s", status, path)
	}
	expired := sign(t, p, "k1", claims(p, map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}))
	if status, _ := signIn(t, clientFrom("127.0.0.1"), e.gw.URL, expired); status != http.StatusUnauthorized {
		t.Fatalf("sign-in with an expired JWT: %d", status)
	}
	if status, path := signIn(t, clientFrom("127.0.0.1"), e.gw.URL, "alice-token"); status != 200 ||
		!strings.HasPrefix(path, "/ui/") {
		t.Fatalf("sign-in with a static token: %d at %s", status, path)
	}
}

// TestIssuerDown: with the issuer's JWKS out of reach, a JWT is refused
// with a reason that says so, and static tokens work as before.
func TestIssuerDown(t *testing.T) {
	t.Parallel()
	e, p := jwtSQLite(t, "")
	tok := sign(t, p, "k1", claims(p, nil))
	p.Close()
	r := e.do("POST", "/v1/tickets", tok, `{"title":"x"}`, "Idempotency-Key", "down")
	if r.status != 401 || !strings.Contains(r.body, "could not be fetched") {
		t.Fatalf("issuer down: %+v", r)
	}
	if r := e.do("POST", "/v1/tickets", "agent-token", `{"title":"x"}`, "Idempotency-Key", "static"); r.status != 201 {
		t.Fatalf("a static token, the issuer down: %+v", r)
	}
	if n := len(e.operations()); n != 1 || e.up.count("/v1/tickets") != 1 {
		t.Fatalf("%d operations, %d effects", n, e.up.count("/v1/tickets"))
	}
}

// TestWithdrawnKeyStopsVerifying: a key the issuer no longer publishes
// verifies no new token once the JWKS is older than max_age.
func TestWithdrawnKeyStopsVerifying(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	e, p := jwtClocked(t, ", max_age: 1h, min_refresh: 10s", clock)
	if _, err := p.AddKey("k2"); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", "/_idem/v1/operations", sign(t, p, "k1", claims(p, nil)), ""); r.status != 200 {
		t.Fatalf("k1 while published: %+v", r)
	}
	withdrawn := p.Key("k1")
	p.RemoveKey("k1")
	clock.Advance(time.Hour) // past max_age
	tok, _ := idp.SignWith(withdrawn, "k1", claims(p, map[string]any{"jti": "after"}))
	if r := e.do("GET", "/_idem/v1/operations", tok, ""); r.status != 401 {
		t.Fatalf("a new token of the withdrawn key: %+v", r)
	}
	if r := e.do("GET", "/_idem/v1/operations", sign(t, p, "k2", claims(p, nil)), ""); r.status != 200 {
		t.Fatalf("k2: %+v", r)
	}
}

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
