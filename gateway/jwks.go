package gateway

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/idemgate/idemgate/config"
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
// hold, or whose keys do not verify a signature (a key replaced under
// its kid), but never twice within min_refresh, whatever tokens arrive:
// an attacker's invented kids or forged signatures cost one fetch per
// min_refresh at most. One fetch at a time: the callers that need the
// keys meanwhile wait for it (at most its timeout, or their request's
// end), and none queues behind another.
type jwks struct {
	url        string
	algs       []jose.SignatureAlgorithm
	minRefresh time.Duration
	maxAge     time.Duration
	now        func() time.Time
	client     *http.Client
	log        *slog.Logger

	keys    atomic.Pointer[keySet]
	mu      sync.Mutex   // guards last, lastErr and flight
	last    time.Time    // the last fetch's start, successful or not
	lastErr error        // the last fetch's error; nil once one succeeds
	flight  *fetchFlight // the fetch under way, if any
	fetches atomic.Int64
	// refreshing counts the callers in refresh: fetching, or waiting
	// for a fetch (a test waits for them all to be there).
	refreshing atomic.Int64
}

// fetchFlight is one fetch of the JWKS, which every caller that needs
// the keys meanwhile waits for; done is closed once set and err are.
type fetchFlight struct {
	done chan struct{}
	set  *keySet
	err  error
}

// keySet is one fetch's usable keys, by kid, and the thumbprints (RFC
// 7638) of all of them: a verified token is kept only while the key that
// verified it is in the set in hand.
type keySet struct {
	byKID   map[string][]jose.JSONWebKey
	thumbs  map[string]bool
	fetched time.Time
}

// fetchTimeout bounds a fetch of the JWKS, and so any request's wait for
// the keys.
const fetchTimeout = 5 * time.Second

func newJWKS(j *config.JWT, log *slog.Logger) *jwks {
	algs := make([]jose.SignatureAlgorithm, len(j.Algorithms))
	for i, a := range j.Algorithms {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	return &jwks{url: j.JWKSURL, algs: algs, minRefresh: j.MinRefresh, maxAge: j.MaxAge, now: j.Clock, log: log,
		client: &http.Client{Timeout: fetchTimeout, CheckRedirect: secureRedirect}}
}

// secureRedirect follows a redirect of the JWKS only where jwks_url may
// point (https, or plain http to a loopback address), five at most: a
// redirect to plain http elsewhere would let the keys be swapped on the
// way, around the rule on jwks_url.
func secureRedirect(req *http.Request, via []*http.Request) error {
	if !config.SecureOrLoopback(req.URL.String()) {
		return fmt.Errorf("redirected to %s: want https (plain http only to a loopback address)", req.URL.Redacted())
	}
	if len(via) >= 5 {
		return errors.New("more than 5 redirects")
	}
	return nil
}

// verificationKey carries a *verification through go-oidc's Verify to
// VerifySignature, which fills it in.
type verificationKey struct{}

// verification is what VerifySignature found besides the payload: the
// thumbprint of the key that verified the token, and whether the keys
// could not be fetched when they were needed.
type verification struct {
	thumb       string
	unreachable bool
}

// VerifySignature implements oidc.KeySet: the payload of a token signed,
// with an accepted algorithm, by the issuer's key its kid names. The set
// is fetched again, within the rate, when it is older than max_age, when
// it holds no key of the kid, or when its keys of the kid do not verify
// the signature.
func (k *jwks) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	sig, err := jose.ParseSignedCompact(token, k.algs)
	if err != nil {
		return nil, err
	}
	if len(sig.Signatures) != 1 {
		return nil, errors.New("want one signature")
	}
	v, _ := ctx.Value(verificationKey{}).(*verification)
	if v == nil {
		v = &verification{}
	}
	set := k.keys.Load()
	if set != nil && k.now().Sub(set.fetched) < k.maxAge {
		if payload, ok := set.verify(sig, v); ok {
			return payload, nil
		}
	}
	fresh, err := k.refresh(ctx, set)
	v.unreachable = err != nil
	if fresh != nil {
		set = fresh
	}
	if set != nil {
		if payload, ok := set.verify(sig, v); ok {
			return payload, nil
		}
	}
	return nil, errUnknownSigner
}

// verify tries the keys of the signature's kid (every key, for a token
// without a kid); the one that verifies it is told to v.
func (s *keySet) verify(sig *jose.JSONWebSignature, v *verification) ([]byte, bool) {
	h := sig.Signatures[0].Header
	for _, key := range s.find(h.KeyID) {
		if key.Algorithm != "" && key.Algorithm != h.Algorithm {
			continue // a key published for one algorithm is used for no other
		}
		if payload, err := sig.Verify(key.Key); err == nil {
			v.thumb = thumbprint(key)
			return payload, true
		}
	}
	return nil, false
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

// holds reports whether the set in hand still has the key of thumbprint
// thumb (false before any fetch).
func (k *jwks) holds(thumb string) bool {
	set := k.keys.Load()
	return set != nil && thumb != "" && set.thumbs[thumb]
}

// thumbprint is a key's RFC 7638 thumbprint, as text; "" if it has none.
func thumbprint(key jose.JSONWebKey) string {
	t, err := key.Thumbprint(crypto.SHA256)
	if err != nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(t)
}

// refresh returns the set a fetch made: another caller's since seen was
// in hand, the one under way, or a new one unless the last began within
// min_refresh. Its error is the fetch's, or the last one's when none may
// start yet: the keys could not be fetched. A failed fetch keeps the set
// in hand: an issuer briefly down does not log everyone out.
func (k *jwks) refresh(ctx context.Context, seen *keySet) (*keySet, error) {
	k.refreshing.Add(1)
	defer k.refreshing.Add(-1)
	k.mu.Lock()
	if cur := k.keys.Load(); cur != seen {
		k.mu.Unlock()
		return cur, nil // another caller fetched meanwhile
	}
	f := k.flight
	if f == nil {
		if !k.last.IsZero() && k.now().Sub(k.last) < k.minRefresh {
			err := k.lastErr
			k.mu.Unlock()
			return nil, err
		}
		f = &fetchFlight{done: make(chan struct{})}
		k.flight, k.last = f, k.now()
		k.fetches.Add(1)
		go k.fly(f)
	}
	k.mu.Unlock()
	select {
	case <-f.done:
		return f.set, f.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fly makes the fetch f, keeps its set, and tells its waiters.
func (k *jwks) fly(f *fetchFlight) {
	set, err := k.fetch()
	k.mu.Lock()
	if err == nil {
		k.keys.Store(set)
	} else {
		k.log.Warn("fetch the JWKS", slog.String("url", k.url), slog.String("error", err.Error()))
	}
	k.lastErr, k.flight = err, nil
	k.mu.Unlock()
	f.set, f.err = set, err
	close(f.done)
}

// fetch reads the JWKS, keeping its public signing keys. Its context is
// its own: a client that gives up does not cut a fetch others wait for.
func (k *jwks) fetch() (*keySet, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
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
	set := &keySet{byKID: map[string][]jose.JSONWebKey{}, thumbs: map[string]bool{}, fetched: k.now()}
	for _, key := range doc.Keys {
		if key.IsPublic() && key.Valid() && (key.Use == "" || key.Use == "sig") {
			set.byKID[key.KeyID] = append(set.byKID[key.KeyID], key)
			if t := thumbprint(key); t != "" {
				set.thumbs[t] = true
			}
		}
	}
	return set, nil
}
