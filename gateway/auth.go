package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strings"
)

type principalKey struct{}

// PrincipalFrom returns the authenticated caller of a request.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// HasRole reports whether the principal holds role.
func (p *Principal) HasRole(role string) bool { return slices.Contains(p.Roles, role) }

var errNoToken = errors.New("send Authorization: Bearer <token>")

// authenticate finds the principal whose token hashes to the bearer
// token's SHA-256. Every principal is compared, in constant time, so the
// answer's timing says nothing about which hash came close; tokens are
// never stored, only their hashes.
func (g *Gateway) authenticate(r *http.Request) (*Principal, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, errNoToken
	}
	found := g.PrincipalByToken(token)
	if found == nil {
		return nil, errors.New("unknown token")
	}
	return found, nil
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
