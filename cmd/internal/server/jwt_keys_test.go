package server_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/idp"
)

// read is the control API's list of operations, as tok's holder: 200 if
// tok is a principal, 401 if not.
func (e *env) read(tok string) reply {
	e.t.Helper()
	return e.do("GET", "/_idem/v1/operations", tok, "")
}

// TestCachedJWTEndsWithItsKey: a verified token is kept only while the
// key that verified it is in the issuer's JWKS: once a fetch no longer
// finds that key, the token is refused, though its exp is a hundred
// years ahead. And no verification is kept past max_age: then the token
// is verified again, against the JWKS fetched again.
func TestCachedJWTEndsWithItsKey(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	e, p := jwtClocked(t, ", min_refresh: 10s, max_age: 1h", clock)
	century := map[string]any{"exp": clock.Now().AddDate(100, 0, 0).Unix()}
	old := sign(t, p, "k1", claims(p, century))
	if r := e.read(old); r.status != 200 {
		t.Fatalf("k1's token: %+v", r)
	}
	// The issuer withdraws k1; a token of its new key k2 has the JWKS
	// fetched again.
	if _, err := p.AddKey("k2"); err != nil {
		t.Fatal(err)
	}
	p.RemoveKey("k1")
	clock.Advance(10 * time.Second) // past min_refresh
	tok2 := sign(t, p, "k2", claims(p, century))
	if r := e.read(tok2); r.status != 200 {
		t.Fatalf("k2's token: %+v", r)
	}
	if r := e.read(old); r.status != 401 {
		t.Fatalf("a token of the withdrawn k1, cached before: %d %s", r.status, r.body)
	}
	// k2 is withdrawn in turn, and nothing has the JWKS fetched: past
	// max_age, k2's token is verified again, and refused.
	if _, err := p.AddKey("k3"); err != nil {
		t.Fatal(err)
	}
	p.RemoveKey("k2")
	if r := e.read(tok2); r.status != 200 {
		t.Fatalf("k2's token within max_age: %+v", r)
	}
	clock.Advance(time.Hour)
	if r := e.read(tok2); r.status != 401 {
		t.Fatalf("k2's token past max_age, k2 withdrawn: %d %s", r.status, r.body)
	}
	if r := e.read(sign(t, p, "k3", claims(p, century))); r.status != 200 {
		t.Fatalf("k3's token: %+v", r)
	}
}

// TestKeyReplacedUnderItsKID: an issuer that publishes a new key under a
// kid it used has the new key's tokens accepted at once (a signature that
// fails on a known kid fetches the JWKS again), and the old key's tokens,
// cached or not, refused; forged signatures on a known kid fetch at most
// once per min_refresh, as invented kids do.
func TestKeyReplacedUnderItsKID(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	e, p := jwtClocked(t, ", min_refresh: 10s, max_age: 1h", clock)
	oldKey := p.Key("k1")
	old := sign(t, p, "k1", claims(p, nil))
	if r := e.read(old); r.status != 200 {
		t.Fatalf("the first k1: %+v", r)
	}
	if _, err := p.ReplaceKey("k1"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second) // past min_refresh
	if r := e.read(sign(t, p, "k1", claims(p, map[string]any{"jti": "new"}))); r.status != 200 {
		t.Fatalf("a token of the new key under k1: %d %s", r.status, r.body)
	}
	if r := e.read(old); r.status != 401 {
		t.Fatalf("a cached token of the replaced key: %d %s", r.status, r.body)
	}
	again, _ := idp.SignWith(oldKey, "k1", claims(p, map[string]any{"jti": "old-again"}))
	if r := e.read(again); r.status != 401 {
		t.Fatalf("a new token of the replaced key: %d %s", r.status, r.body)
	}
	stranger, err := idp.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	before := p.Fetches()
	for i := range 20 {
		forged, _ := idp.SignWith(stranger, "k1", claims(p, map[string]any{"jti": i}))
		if s := e.read(forged).status; s != 401 && s != 429 {
			t.Fatalf("a forged signature on k1: %d", s)
		}
	}
	if n := p.Fetches() - before; n > 1 {
		t.Fatalf("%d fetches of the JWKS for 20 forged signatures on a known kid within min_refresh", n)
	}
}

// TestJWKSRedirectsStayHTTPS: jwks_url's https-only rule holds for its
// redirects: a JWKS served on a loopback address that redirects to plain
// http on another address is not followed (the keys could be swapped on
// the way), and the token is refused as the keys being unreachable.
func TestJWKSRedirectsStayHTTPS(t *testing.T) {
	t.Parallel()
	p := startIDP(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(p.JWKSURL[:strings.LastIndex(p.JWKSURL, "/")], "http://"))
	// 0.0.0.0 is no loopback address, yet a connection to it reaches
	// this host's loopback listener: were the redirect followed, the keys
	// would be fetched.
	redirect := httptest.NewServer(http.RedirectHandler("http://0.0.0.0:"+port+"/jwks.json", http.StatusFound))
	t.Cleanup(redirect.Close)
	e := hostileEnv(t, p, redirect.URL+"/jwks.json")
	r := e.read(sign(t, p, "k1", claims(p, nil)))
	if r.status != 401 || !strings.Contains(r.body, "could not be fetched") {
		t.Fatalf("a JWKS redirected to plain http: %d %s", r.status, r.body)
	}
	if n := p.Fetches(); n != 0 {
		t.Fatalf("the redirect was followed: %d fetches", n)
	}
	if !strings.Contains(e.logs.String(), "want https") {
		t.Fatalf("the log does not say why:\n%s", e.logs.String())
	}
}

// TestJWKSUnreachableSaysSo: a token whose kid needs the JWKS fetched
// again while the issuer is unreachable is refused saying so (try again
// later), not that its signer or audience is wrong, whether it made the
// failed fetch or came within min_refresh after it.
func TestJWKSUnreachableSaysSo(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	e, p := jwtClocked(t, ", min_refresh: 10s", clock)
	if r := e.read(sign(t, p, "k1", claims(p, nil))); r.status != 200 {
		t.Fatalf("k1: %+v", r)
	}
	if _, err := p.AddKey("k2"); err != nil {
		t.Fatal(err)
	}
	p.Close()
	clock.Advance(10 * time.Second)
	for i := range 2 { // the failed fetch, then within min_refresh of it
		r := e.read(sign(t, p, "k2", claims(p, map[string]any{"jti": fmt.Sprint(i)})))
		if r.status != 401 || !strings.Contains(r.body, "could not be fetched: try again later") {
			t.Fatalf("a new kid, the issuer unreachable (%d): %d %s", i, r.status, r.body)
		}
	}
	if r := e.read(sign(t, p, "k1", claims(p, map[string]any{"aud": "another-api"}))); r.status != 401 ||
		!strings.Contains(r.body, "not the configured one") {
		t.Fatalf("a wrong audience is still said so: %d %s", r.status, r.body)
	}
}

// TestTenantsBoundJWTs: with tenants: written, a JWT whose tenant claim
// names another tenant is refused, though its issuer signed it; one of a
// named tenant is served.
func TestTenantsBoundJWTs(t *testing.T) {
	t.Parallel()
	p := startIDP(t)
	auth := fmt.Sprintf("auth:\n  jwt: {issuer: %q, audience: idemgate, jwks_url: %q, tenant_claim: org}\n"+
		"tenants: [acme, globex]\n", p.Issuer, p.JWKSURL)
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, auth)
	if r := e.read(sign(t, p, "k1", claims(p, map[string]any{"org": "globex"}))); r.status != 200 {
		t.Fatalf("a named tenant's token: %d %s", r.status, r.body)
	}
	r := e.read(sign(t, p, "k1", claims(p, map[string]any{"org": "initech"})))
	if r.status != 401 || !strings.Contains(r.body, "not one of this gateway's tenants") {
		t.Fatalf("another tenant's token: %d %s", r.status, r.body)
	}
}

// hostileJWKS serves, as jwks_url, whatever serve writes: a JWKS whose

// keys are published with a use or alg of its choosing, a 500, a body

// too large, or no answer at all.

func hostileJWKS(t *testing.T, serve func(w http.ResponseWriter, r *http.Request)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(serve))
	t.Cleanup(srv.Close)
	return srv
}

// hostileEnv is a gateway whose auth.jwt trusts p's issuer but fetches

// its keys from jwksURL.

func hostileEnv(t *testing.T, p *idp.IDP, jwksURL string) *env {
	t.Helper()
	auth := fmt.Sprintf("auth:\n  jwt: {issuer: %q, audience: idemgate, jwks_url: %q, tenant_claim: org, min_refresh: 1h}\n",
		p.Issuer, jwksURL)
	db := dbtest.SQLiteDB(t)
	return newEnv(t, db.Open(t), db.DSN, auth)
}

// TestHostileJWKS: a key published for encryption (use: enc) or for

// another algorithm verifies nothing; an issuer answering 500, a body

// over the bound, or nothing for a long time, costs a request a bounded

// wait and a 401, never a hang or a reservation.

func TestHostileJWKS(t *testing.T) {
	t.Parallel()
	p := startIDP(t)
	tok := sign(t, p, "k1", claims(p, nil))
	pub := &p.Key("k1").PublicKey
	keySet := func(k jose.JSONWebKey) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{k}})
		}
	}
	var hung atomic.Int64
	cases := map[string]func(http.ResponseWriter, *http.Request){
		"use enc":    keySet(jose.JSONWebKey{Key: pub, KeyID: "k1", Use: "enc"}),
		"alg RS384":  keySet(jose.JSONWebKey{Key: pub, KeyID: "k1", Algorithm: "RS384", Use: "sig"}),
		"status 500": func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", 500) },
		"huge body":  func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"keys":[`+strings.Repeat(" ", 2<<20)) },
		"never answers": func(w http.ResponseWriter, r *http.Request) {
			hung.Add(1)
			<-r.Context().Done()
		},
	}
	for name, serve := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := hostileEnv(t, p, hostileJWKS(t, serve).URL)
			start := time.Now()
			r := e.do("POST", "/v1/tickets", tok, `{"title":"x"}`, "Idempotency-Key", "k")
			// A minute bounds a request that would wait for the hung server
			// for ever (its fetch is cut at 5s); it is no timing of the cut.
			if r.status != 401 || time.Since(start) > time.Minute {
				t.Fatalf("%d after %v: %s", r.status, time.Since(start), r.body)
			}
			if len(e.operations()) != 0 || e.up.count("/v1/tickets") != 0 {
				t.Fatal("a refused token reserved or reached the upstream")
			}
		})
	}
}
