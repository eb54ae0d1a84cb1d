package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"github.com/idemgate/idemgate/config"
	"math"
	"net/http"
	"strings"

	"github.com/idemgate/idemgate/contract"
)

type principalKey struct{}

// PrincipalFrom returns the authenticated caller of a request.
func PrincipalFrom(ctx context.Context) *config.Principal {
	p, _ := ctx.Value(principalKey{}).(*config.Principal)
	return p
}

// Authenticated refuses requests without a known bearer token (401), and
// gives the others their principal (PrincipalFrom, CallerOf). A client
// (an address, an IPv6 /64) past its failed attempts gets 429 for its
// unknown tokens; a known token is served whoever fails beside it.
func (g *Gateway) Authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, prob := g.authenticate(r)
		if prob != nil {
			if prob.Status == http.StatusUnauthorized {
				challenge := `Bearer realm="idemgate"`
				if r.Header.Get("Authorization") != "" {
					challenge += `, error="invalid_token"` // RFC 6750: a token was sent, and refused
				}
				w.Header().Set("WWW-Authenticate", challenge)
			}
			prob.Write(w)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// authenticate finds the request's principal: by its bearer token (a
// configured principal's, or a JWT of auth.jwt), or, without one, by its
// verified client certificate (a principal with cert_subject and no
// token). A principal bound to a certificate's subject is refused over a
// connection that did not present that certificate.
//
// The token is checked before the client's failures are, so that a known
// token is never refused for what others at its address (behind one NAT
// or proxy) failed: no budget of failures may lock an approver or an agent
// out. An unknown one counts against its client's failures, and past
// them is answered 429 with the wait; a request without a token is no
// guess, and does not count.
func (g *Gateway) authenticate(r *http.Request) (*config.Principal, *contract.Problem) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		subject := clientSubject(r)
		if p := g.principalByCert(subject); p != nil {
			return p, nil
		}
		if subject != "" {
			// The client's own certificate: naming it tells the operator
			// what to write in cert_subject, and the client nothing new.
			return nil, contract.NewProblem(contract.CodeUnauthorized, fmt.Sprintf("no principal's cert_subject is "+
				"this certificate's subject, %q (compared exactly); or send Authorization: Bearer <token>", subject))
		}
		return nil, contract.NewProblem(contract.CodeUnauthorized, "send Authorization: Bearer <token>")
	}
	found, why := g.PrincipalFor(r, token)
	if found != nil {
		return found, nil
	}
	if wait, ok := g.limits.Failures().Fail(r.RemoteAddr); !ok {
		p := contract.NewProblem(contract.CodeRateLimited, "unknown token, and too many from this address: "+
			"wait before trying again")
		p.RetryAfter = int(math.Ceil(wait.Seconds()))
		return nil, p
	}
	return nil, contract.NewProblem(contract.CodeUnauthorized, why)
}

// PrincipalFor is the principal token authenticates on r: a configured
// principal's (bound to r's client certificate if its cert_subject says
// so), or, with auth.jwt, a valid JWT's. Otherwise nil, and why, in words
// fit for the client (never the token).
func (g *Gateway) PrincipalFor(r *http.Request, token string) (*config.Principal, string) {
	token = strings.TrimSpace(token)
	sum := sha256.Sum256([]byte(token))
	if p := g.principalBySum(sum); p != nil {
		if p.CertSubject != "" && p.CertSubject != clientSubject(r) {
			return nil, "this token is bound to a client certificate this connection did not present"
		}
		return p, ""
	}
	if g.jwt == nil || !looksLikeJWT(token) {
		return nil, "unknown token"
	}
	p, err := g.jwt.principal(r.Context(), token, sum)
	if err != nil {
		return nil, "the JWT was refused: " + err.Error()
	}
	return p, ""
}

// PrincipalByToken finds the configured principal whose token hashes to
// token's SHA-256, comparing with every one in constant time; nil if
// none. It knows nothing of certificates: PrincipalFor does.
func (g *Gateway) PrincipalByToken(token string) *config.Principal {
	return g.principalBySum(sha256.Sum256([]byte(strings.TrimSpace(token))))
}

func (g *Gateway) principalBySum(sum [32]byte) *config.Principal {
	var found *config.Principal
	for _, p := range g.cfg.Principals {
		if p.TokenHash() != nil && subtle.ConstantTimeCompare(sum[:], p.TokenHash()) == 1 {
			found = p
		}
	}
	return found
}

// principalByCert is the principal that a verified client certificate's
// subject alone authenticates (cert_subject without a token); nil if none.
func (g *Gateway) principalByCert(subject string) *config.Principal {
	if subject == "" {
		return nil
	}
	for _, p := range g.cfg.Principals {
		if p.TokenHash() == nil && p.CertSubject == subject {
			return p
		}
	}
	return nil
}

// clientSubject is the subject of the client certificate the TLS
// handshake verified against client_ca, its exact RDN sequence as RFC
// 2253 writes it ("CN=agent-1,O=acme": certSubject); "" without one.
func clientSubject(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return ""
	}
	return config.CertSubject(r.TLS.VerifiedChains[0][0])
}
