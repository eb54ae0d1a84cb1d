package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/contract"
)

type principalKey struct{}

// PrincipalFrom returns the authenticated caller of a request.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// HasRole reports whether the principal holds role.
func (p *Principal) HasRole(role string) bool { return slices.Contains(p.Roles, role) }

// Authenticated refuses requests without a known bearer token (401), and
// gives the others their principal (PrincipalFrom, CallerOf). A client
// (an address, an IPv6 /64) past its failed attempts gets 429 for its
// unknown tokens; a known token is served whoever fails beside it.
func (g *Gateway) Authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, prob := g.authenticate(r)
		if prob != nil {
			if prob.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="idemgate"`)
			}
			prob.Write(w)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// authenticate finds the principal whose token hashes to the bearer
// token's SHA-256. Every principal is compared, in constant time, so the
// answer's timing says nothing about which hash came close; tokens are
// never stored, only their hashes.
//
// The token is checked before the client's failures are, so that a known
// token is never refused for what others at its address (behind one NAT
// or proxy) failed: no budget of failures may lock an approver or an agent
// out. An unknown one counts against its client's failures, and past
// them is answered 429 with the wait; a request without a token is no
// guess, and does not count.
func (g *Gateway) authenticate(r *http.Request) (*Principal, *contract.Problem) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, contract.NewProblem(contract.CodeUnauthorized, "send Authorization: Bearer <token>")
	}
	if found := g.PrincipalByToken(token); found != nil {
		return found, nil
	}
	if wait, ok := g.limits.Failures().Fail(r.RemoteAddr); !ok {
		p := contract.NewProblem(contract.CodeRateLimited, "unknown token, and too many from this address: "+
			"wait before trying again")
		p.RetryAfter = int(math.Ceil(wait.Seconds()))
		return nil, p
	}
	return nil, contract.NewProblem(contract.CodeUnauthorized, "unknown token")
}

// PrincipalByToken finds the principal whose token hashes to token's
// SHA-256, comparing with every one in constant time; nil if none.
func (g *Gateway) PrincipalByToken(token string) *Principal {
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	var found *Principal
	for _, p := range g.cfg.Principals {
		if subtle.ConstantTimeCompare(sum[:], p.hash) == 1 {
			found = p
		}
	}
	return found
}
