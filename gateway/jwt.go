package gateway

import (
	"context"
	"errors"
	"github.com/idemgate/idemgate/config"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// jwtAuth verifies the access tokens of auth.jwt (docs/design.md,
// "Identity, transport and operations"): go-oidc checks the signature
// (with the keys of jwks, and only the configured config.Asymmetric algorithms:
// never none, never a shared secret), the issuer and the audience; the
// times are checked here, with the configured leeway on both exp and nbf
// (go-oidc's nbf skew is a fixed five minutes). A verified token's
// principal is kept by the SHA-256 of the token, until its exp, for
// max_age at most, and only while the key that verified it is in the
// JWKS in hand.
type jwtAuth struct {
	cfg      *config.JWT
	keys     *jwks
	verifier *oidc.IDTokenVerifier
	cache    *tokenCache
}

func newJWTAuth(j *config.JWT, log *slog.Logger) *jwtAuth {
	keys := newJWKS(j, log)
	v := oidc.NewVerifier(j.Issuer, keys, &oidc.Config{ClientID: j.Audience, SupportedSigningAlgs: j.Algorithms,
		SkipExpiryCheck: true, Now: j.Clock})
	return &jwtAuth{cfg: j, keys: keys, verifier: v, cache: newTokenCache(maxCachedTokens)}
}

// maxCachedTokens bounds the verified tokens kept.
const maxCachedTokens = 10000

// looksLikeJWT reports whether a token has a compact JWS's three parts,
// the only form a JWT can be verified in.
func looksLikeJWT(token string) bool { return strings.Count(token, ".") == 2 }

// principal is the principal of a valid token (sum its SHA-256), or why
// it is refused (a reason fit to tell the client: it names no key, no
// claim's value).
func (a *jwtAuth) principal(ctx context.Context, token string, sum [32]byte) (*config.Principal, error) {
	now := a.cfg.Clock()
	if p := a.cache.get(sum, now, a.keys.holds); p != nil {
		return p, nil
	}
	v := &verification{}
	t, err := a.verifier.Verify(context.WithValue(ctx, verificationKey{}, v), token)
	if err != nil {
		return nil, a.refusal(err, v)
	}
	var claims map[string]any
	if err := t.Claims(&claims); err != nil {
		return nil, errors.New("its claims are not a JSON object")
	}
	until, err := a.window(t, claims, now)
	if err != nil {
		return nil, err
	}
	p, err := a.cfg.PrincipalOf(claims)
	if err != nil {
		return nil, err
	}
	p = p.Until(until)
	kept := until
	if limit := now.Add(a.cfg.MaxAge); limit.Before(kept) {
		kept = limit // a verification is kept for max_age at most
	}
	a.cache.put(sum, cachedToken{p: p, until: kept, thumb: v.thumb}, now)
	return p, nil
}

// refusal says why go-oidc refused a token: expired, the issuer's keys
// out of reach when they were needed, or the wrong signer, issuer or
// audience.
func (a *jwtAuth) refusal(err error, v *verification) error {
	var expired *oidc.TokenExpiredError
	switch {
	case errors.As(err, &expired):
		return errors.New("the token has expired")
	case v.unreachable || a.keys.keys.Load() == nil:
		return errors.New("the issuer's keys (jwks_url) could not be fetched: try again later")
	}
	return errors.New("its signer, issuer or audience is not the configured one")
}

// window checks exp (required) and nbf (if any) with the leeway, and
// returns until when the token is valid.
func (a *jwtAuth) window(t *oidc.IDToken, claims map[string]any, now time.Time) (time.Time, error) {
	if t.Expiry.IsZero() {
		return time.Time{}, errors.New("it has no exp")
	}
	until := t.Expiry.Add(a.cfg.Leeway)
	if !now.Before(until) {
		return time.Time{}, errors.New("the token has expired")
	}
	if nbf, ok := claims["nbf"]; ok {
		f, ok := nbf.(float64)
		if !ok {
			return time.Time{}, errors.New("its nbf is not a number")
		}
		if now.Add(a.cfg.Leeway).Before(time.Unix(int64(f), 0)) {
			return time.Time{}, errors.New("the token is not valid yet")
		}
	}
	return until, nil
}

// tokenCache keeps verified tokens' principals by the SHA-256 of the
// token (never the token), each until its token's exp or max_age after
// its verification, whichever comes first, and while the key that
// verified it (its thumbprint) is in the JWKS in hand: a fetch that no
// longer finds the key ends its tokens. At most max of them: past that,
// expired ones go first, then arbitrary ones (a token dropped is
// verified again, nothing worse).
type tokenCache struct {
	mu  sync.RWMutex
	m   map[[32]byte]cachedToken
	max int
}

type cachedToken struct {
	p     *config.Principal
	until time.Time
	thumb string // the thumbprint of the key that verified it
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{m: map[[32]byte]cachedToken{}, max: max}
}

// get is the principal of a token kept, valid at now, whose key holds
// says is still the issuer's.
func (c *tokenCache) get(sum [32]byte, now time.Time, holds func(thumb string) bool) *config.Principal {
	c.mu.RLock()
	e, ok := c.m[sum]
	c.mu.RUnlock()
	if !ok || !now.Before(e.until) || !holds(e.thumb) {
		return nil
	}
	return e.p
}

func (c *tokenCache) put(sum [32]byte, e cachedToken, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < c.max*7/8 {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[sum] = e
}
