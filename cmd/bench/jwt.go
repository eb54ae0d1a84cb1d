package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"time"

	"github.com/idemgate/idemgate/internal/idp"
	"github.com/idemgate/idemgate/store/sqlite"
)

// The -jwt pair: one SQLite gateway with auth.jwt, reached with the bench
// principal's static token and with a JWT of an identity provider in this
// process. The two rows share the gateway, its store and its rounds: only
// the token differs, so their ratio is what verifying a JWT costs (issue
// 23: within 5%, the verified token cached for its lifetime).
const (
	jwtStatic = "(j) idemgate sqlite +jwt, static token"
	jwtToken  = "(k) idemgate sqlite +jwt, JWT"
)

// minJWTRatio is issue 23's target: a JWT's rows at ≥ 0.95× the static
// token's.
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
	auth := fmt.Sprintf("auth: {jwt: {issuer: %q, audience: idemgate, jwks_url: %q, tenant_claim: tenant}}\n",
		p.Issuer, p.JWKSURL)
	url, err := e.serveGateway(jwtStatic, st, "sqlite:"+path, upstream, dir, auth)
	if err != nil {
		return err
	}
	e.targets = append(e.targets, target{name: jwtToken, url: url, token: jwt})
	return nil
}

// jwtChecks judges the pair: the JWT's new keys and replays against the
// static token's, at the highest concurrency.
func jwtChecks(r map[row]*result, hi int) []check {
	var out []check
	for _, mode := range modes {
		j, s := r[row{jwtToken, mode, hi}], r[row{jwtStatic, mode, hi}]
		if j == nil || s == nil {
			continue
		}
		ratio := j.rate / s.rate
		out = append(out, check{fmt.Sprintf("%s c=%d, a JWT vs a static token", mode, hi),
			fmt.Sprintf("%.0f vs %.0f req/s: %.2f× (rounds %s)", j.rate, s.rate, ratio, rateRange(j, s)),
			fmt.Sprintf("≥ %.2f×", minJWTRatio), ratio >= minJWTRatio})
	}
	return out
}

// staticSum is the SHA-256 of the bench principal's token, as its
// configuration holds it.
func staticSum() string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
