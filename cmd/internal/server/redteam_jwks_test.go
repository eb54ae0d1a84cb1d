package server_test

import (
	"encoding/json"
	"fmt"
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
