// Package idp is an identity provider in one process, for the tests and
// the benchmark of auth.jwt: RSA signing keys, their JWKS served over
// HTTP (its fetches counted), keys added (a rotation) and access tokens
// signed with any of them, or with nothing (alg none) and a shared
// secret, as an attacker would try.
package idp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"

	jose "github.com/go-jose/go-jose/v4"
)

// IDP is a running identity provider: Issuer is its iss, JWKSURL where
// it publishes the public half of its keys.
type IDP struct {
	Issuer  string
	JWKSURL string
	srv     *httptest.Server
	mu      sync.Mutex
	keys    map[string]*rsa.PrivateKey
	order   []string
	fetches atomic.Int64
}

// Start serves a JWKS with one key, kid "k1"; Close stops it.
func Start() (*IDP, error) {
	p := &IDP{keys: map[string]*rsa.PrivateKey{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jwks.json", p.serveJWKS)
	p.srv = httptest.NewServer(mux)
	p.Issuer, p.JWKSURL = p.srv.URL, p.srv.URL+"/jwks.json"
	if _, err := p.AddKey("k1"); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close stops serving the JWKS.
func (p *IDP) Close() { p.srv.Close() }

// Fetches is how many times the JWKS was read.
func (p *IDP) Fetches() int64 { return p.fetches.Load() }

// AddKey makes a key, published from now on under kid.
func (p *IDP) AddKey(kid string) (*rsa.PrivateKey, error) {
	k, err := NewKey()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys[kid] = k
	p.order = append(p.order, kid)
	return k, nil
}

// ReplaceKey makes a new key and publishes it under kid instead of the
// one kid named, as an issuer that reuses its kids rotates; tokens can
// still be signed with the old one (idp.SignWith), as an attacker
// holding it would.
func (p *IDP) ReplaceKey(kid string) (*rsa.PrivateKey, error) {
	k, err := NewKey()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.order, kid) {
		p.order = append(p.order, kid)
	}
	p.keys[kid] = k
	return k, nil
}

// RemoveKey stops publishing kid, as an issuer withdraws a key; tokens
// can still be signed with it (idp.SignWith), as an attacker holding it
// would.
func (p *IDP) RemoveKey(kid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.order = slices.DeleteFunc(p.order, func(k string) bool { return k == kid })
}

// NewKey is an RSA key that no JWKS publishes (yet), and that no other
// call in this process was given. The first ones come from keys.pem,
// made once for the tests and committed: a 2048-bit key took some 150 ms
// of CPU to make under -race, and a run of the tests made thirty of them.
// Past those, it makes one.
func NewKey() (*rsa.PrivateKey, error) {
	pool.Lock()
	defer pool.Unlock()
	if !pool.read {
		pool.read = true
		keys, err := parseKeys(keysPEM)
		if err != nil {
			return nil, err
		}
		pool.keys = keys
	}
	if len(pool.keys) > 0 {
		k := pool.keys[0]
		pool.keys = pool.keys[1:]
		return k, nil
	}
	return rsa.GenerateKey(rand.Reader, 2048)
}

// keysPEM are test keys, never a deployment's: they are public here.
//
//go:embed testdata/keys.pem
var keysPEM []byte

// pool holds the committed keys no call has been given yet.
var pool struct {
	sync.Mutex
	read bool
	keys []*rsa.PrivateKey
}

// parseKeys reads every PKCS #1 block of b.
func parseKeys(b []byte) ([]*rsa.PrivateKey, error) {
	var keys []*rsa.PrivateKey
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return keys, nil
		}
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("idp: keys.pem: %w", err)
		}
		keys = append(keys, k)
	}
}

// Key is the private key of kid; nil if there is none.
func (p *IDP) Key(kid string) *rsa.PrivateKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keys[kid]
}

func (p *IDP) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	p.fetches.Add(1)
	p.mu.Lock()
	var set jose.JSONWebKeySet
	for _, kid := range p.order {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &p.keys[kid].PublicKey, KeyID: kid, Algorithm: "RS256",
			Use: "sig"})
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(set)
}

// Sign signs claims with kid's key (RS256).
func (p *IDP) Sign(kid string, claims map[string]any) (string, error) {
	k := p.Key(kid)
	if k == nil {
		return "", fmt.Errorf("no key %q", kid)
	}
	return SignWith(k, kid, claims)
}

// SignWith signs claims with any RSA key, naming kid in its header.
func SignWith(k *rsa.PrivateKey, kid string, claims map[string]any) (string, error) {
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid)
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k}, opts)
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	obj, err := s.Sign(payload)
	if err != nil {
		return "", err
	}
	return obj.CompactSerialize()
}

// Unsigned is a token with alg none and no signature.
func Unsigned(claims map[string]any) string {
	return compact(map[string]any{"alg": "none", "typ": "JWT"}, claims) + "."
}

// HMACWith is a token with alg HS256 whose secret is secret: signed with
// a public key's bytes, the confusion of algorithms an attacker tries.
func HMACWith(secret []byte, kid string, claims map[string]any) string {
	input := compact(map[string]any{"alg": "HS256", "typ": "JWT", "kid": kid}, claims)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func compact(header, claims map[string]any) string {
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
}
