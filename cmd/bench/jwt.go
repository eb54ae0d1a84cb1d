package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/idp"
	"github.com/idemgate/idemgate/store/sqlite"
)

// The -jwt rows: one SQLite gateway with auth.jwt, reached with the bench
// principal's static token, with a static token as long as the JWT, and
// with a JWT of an identity provider in this process. The rows share the
// gateway, its store and its rounds: only the token differs. Against the
// static token of its length, a JWT's ratio is what verifying it costs
// (issue 23: within 5%, the verified token cached for its lifetime);
// against the short one, also what carrying its bytes in every request
// costs (information: an identity provider's tokens are that long).
const (
	jwtStatic = "(j) idemgate sqlite +jwt, static token"
	jwtLong   = "(l) idemgate sqlite +jwt, static token as long as the JWT"
	jwtToken  = "(k) idemgate sqlite +jwt, JWT"
)

// minJWTRatio is issue 23's target: a JWT's rows at ≥ 0.95× a static
// token's of the same length.
const minJWTRatio = 0.95

// jwtPair starts the identity provider and the gateway, and adds the
// pair's two targets.
func (e *benchEnv) jwtPair(dir, upstream string) error {
	p, err := idp.Start()
	if err != nil {
		return err
	}
	e.closers = append(e.closers, p.Close)
	jwt, err := p.Sign("k1", map[string]any{"iss": p.Issuer, "aud": "idemgate", "sub": "bench-agent",
		"tenant": "bench", "exp": time.Now().Add(24 * time.Hour).Unix()})
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "bench-jwt.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		return err
	}
	long := "bench-long-" + strings.Repeat("x", max(len(jwt)-11, 1))
	more := fmt.Sprintf("  - {name: bench-long, tenant: bench, token_sha256: %s}\n", staticSum(long))
	auth := fmt.Sprintf("auth: {jwt: {issuer: %q, audience: idemgate, jwks_url: %q, tenant_claim: tenant}}\n",
		p.Issuer, p.JWKSURL)
	url, err := e.serveGateway(jwtStatic, st, "sqlite:"+path, upstream, dir, more, auth)
	if err != nil {
		return err
	}
	e.targets = append(e.targets, target{name: jwtLong, url: url, token: long}, target{name: jwtToken, url: url,
		token: jwt})
	return nil
}

// jwtChecks judges the rows: the JWT's new keys and replays against the
// static token of its length (the target) and the short one
// (information), at the highest concurrency.
func jwtChecks(r map[row]*result, hi int) []check {
	var out []check
	for _, mode := range modes {
		for _, vs := range []struct{ name, what, want string }{
			{jwtLong, "a static token as long", fmt.Sprintf("≥ %.2f×", minJWTRatio)},
			{jwtStatic, "the short static token", ""},
		} {
			j, s := r[row{jwtToken, mode, hi}], r[row{vs.name, mode, hi}]
			if j == nil || s == nil {
				continue
			}
			ratio := j.rate / s.rate
			out = append(out, check{fmt.Sprintf("%s c=%d, a JWT vs %s", mode, hi, vs.what),
				fmt.Sprintf("%.0f vs %.0f req/s: %.2f× (rounds %s)", j.rate, s.rate, ratio, rateRange(j, s)),
				vs.want, vs.want == "" || ratio >= minJWTRatio})
		}
	}
	return out
}

// staticSum is the SHA-256 of a static token, as a configuration holds it.
func staticSum(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
