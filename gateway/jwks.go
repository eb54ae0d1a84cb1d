package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// errUnknownSigner is a token signed by no key of the issuer's JWKS.
var errUnknownSigner = errors.New("signed by no key of the issuer")

// jwks is the issuer's key set (an oidc.KeySet): fetched when first
// needed, used for max_age, and fetched again for a kid it does not
// hold, but never twice within min_refresh, whatever tokens arrive: an
// attacker's invented kids cost one fetch per min_refresh at most.
type jwks struct {
	url        string
	algs       []jose.SignatureAlgorithm
	minRefresh time.Duration
	maxAge     time.Duration
	now        func() time.Time
	client     *http.Client
	log        *slog.Logger

	keys    atomic.Pointer[keySet]
	mu      sync.Mutex // one fetch at a time; guards last
	last    time.Time  // the last fetch's start, successful or not
	fetches atomic.Int64
}

// keySet is one fetch's usable keys, by kid.
type keySet struct {
	byKID   map[string][]jose.JSONWebKey
	fetched time.Time
}

func newJWKS(j *JWTConfig, log *slog.Logger) *jwks {
	algs := make([]jose.SignatureAlgorithm, len(j.Algorithms))
	for i, a := range j.Algorithms {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	return &jwks{url: j.JWKSURL, algs: algs, minRefresh: j.MinRefresh, maxAge: j.MaxAge, now: j.clock, log: log,
		client: &http.Client{Timeout: 5 * time.Second}}
}

// VerifySignature implements oidc.KeySet: the payload of a token signed,
// with an accepted algorithm, by the issuer's key its kid names.
func (k *jwks) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	sig, err := jose.ParseSignedCompact(token, k.algs)
	if err != nil {
		return nil, err
	}
	if len(sig.Signatures) != 1 {
		return nil, errors.New("want one signature")
	}
	h := sig.Signatures[0].Header
	for _, key := range k.lookup(h.KeyID) {
		if key.Algorithm != "" && key.Algorithm != h.Algorithm {
			continue // a key published for one algorithm is used for no other
		}
		if payload, err := sig.Verify(key.Key); err == nil {
			return payload, nil
		}
	}
	return nil, errUnknownSigner
}

// lookup returns the keys kid names (every key, for a token without a
// kid), fetching the set when it is stale or lacks kid, within the rate.
func (k *jwks) lookup(kid string) []jose.JSONWebKey {
	set := k.keys.Load()
	if set != nil && k.now().Sub(set.fetched) < k.maxAge {
		if keys := set.find(kid); len(keys) > 0 {
			return keys
		}
	}
	if fresh := k.refresh(set); fresh != nil {
		set = fresh
	}
	if set == nil {
		return nil
	}
	return set.find(kid)
}

func (s *keySet) find(kid string) []jose.JSONWebKey {
	if kid != "" {
		return s.byKID[kid]
	}
	var all []jose.JSONWebKey
	for _, keys := range s.byKID {
		all = append(all, keys...)
	}
	return all
}

// refresh fetches the set unless another caller has since seen, or tried,
// a newer one, or the last fetch began within min_refresh. A failed fetch
// keeps the set in hand: an issuer briefly down does not log everyone out.
func (k *jwks) refresh(seen *keySet) *keySet {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cur := k.keys.Load(); cur != seen {
		return cur // another request fetched meanwhile
	}
	if !k.last.IsZero() && k.now().Sub(k.last) < k.minRefresh {
		return nil
	}
	k.last = k.now()
	k.fetches.Add(1)
	set, err := k.fetch()
	if err != nil {
		k.log.Warn("fetch the JWKS", slog.String("url", k.url), slog.String("error", err.Error()))
		return nil
	}
	k.keys.Store(set)
	return set
}

// fetch reads the JWKS, keeping its public signing keys. Its context is
// its own: a client that gives up does not cut a fetch others wait for.
func (k *jwks) fetch() (*keySet, error) {
	ctx, cancel := context.WithTimeout(context.Background(), k.client.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var doc jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return nil, err
	}
	set := &keySet{byKID: map[string][]jose.JSONWebKey{}, fetched: k.now()}
	for _, key := range doc.Keys {
		if key.IsPublic() && key.Valid() && (key.Use == "" || key.Use == "sig") {
			set.byKID[key.KeyID] = append(set.byKID[key.KeyID], key)
		}
	}
	return set, nil
}
