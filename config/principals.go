package config

import (
	"encoding/hex"
	"slices"
	"strings"
	"time"
)

// Principal is a caller: a bearer token (stored as its SHA-256) mapped to a
// name, a tenant and roles. CertSubject binds it to a client certificate
// (tls.client_ca): with a token, the token is accepted only over a
// connection that presented a certificate of that subject; without one,
// the certificate alone authenticates it.
type Principal struct {
	Name        string   `yaml:"name"`
	Tenant      string   `yaml:"tenant"`
	Roles       []string `yaml:"roles"`
	TokenSHA256 string   `yaml:"token_sha256"`
	CertSubject string   `yaml:"cert_subject"`

	line    int
	hash    []byte
	expires time.Time // a JWT's exp and leeway; zero for a configured principal
	jwt     string    // a JWT's: the auth.jwt settings that made it (JWT.identity)
}

// Expires is when the token that authenticated the principal ends (a
// JWT's exp, with the leeway); zero for a configured principal, whose
// token has no end of its own.
func (p *Principal) Expires() time.Time { return p.expires }

// Until is p that expires at t: a JWT's principal, whose token ends then.
func (p *Principal) Until(t time.Time) *Principal {
	p.expires = t
	return p
}

// Credential names what authenticated p, for what outlives the
// configuration that did (a web page's session): a configured
// principal's token hash and certificate subject, or, for a JWT's, the
// auth.jwt settings that made a principal of its claims.
// Config.StillAuthenticates reads it.
func (p *Principal) Credential() string {
	if p.jwt != "" {
		return JWTPrefix + p.jwt
	}
	return "token:" + hex.EncodeToString(p.hash) + "|cert:" + p.CertSubject
}

// StillAuthenticates reports whether this configuration makes, of the
// credential that signed in the principal name of tenant with roles
// (Principal.Credential), that same principal: so that what the principal
// signed in under another configuration (a reload's predecessor) stays
// only while it is. A configured principal removed, or whose tenant,
// roles, token or certificate subject changed, or a JWT's once auth.jwt
// is removed or makes principals otherwise, is not.
func (c *Config) StillAuthenticates(name, tenant string, roles []string, credential string) bool {
	if settings, ok := strings.CutPrefix(credential, JWTPrefix); ok {
		return c.Auth.JWT != nil && c.Auth.JWT.identity() == settings && c.allows(tenant)
	}
	for _, p := range c.Principals {
		if p.Credential() == credential {
			return p.Name == name && p.Tenant == tenant && slices.Equal(p.Roles, roles)
		}
	}
	return false
}

// checkPrincipals checks each principal, and that no two share a token
// (or, without one, a certificate subject).
func (c *Config) checkPrincipals() error {
	seen := map[string]bool{}
	for _, p := range c.Principals {
		if err := c.checkPrincipal(p); err != nil {
			return err
		}
		key := p.TokenSHA256
		if p.hash == nil {
			key = "cert:" + p.CertSubject
		}
		if seen[key] {
			return c.errorf(p.line, "principal %q: the same token or cert_subject as another principal", p.Name)
		}
		seen[key] = true
	}
	return nil
}

// reservedNames are the prefixes of the principals idemgate names itself,
// with whose they are: a configured principal taking one would share its
// approvals' "never the requester" rule, its MCP intents and its audit
// lines with them.
var reservedNames = map[string]string{JWTPrefix: "JWTs' own", "webhook:": "webhook routes' own",
	"consumer:": "consumers' own"}

// reservedName is the reserved prefix name begins with, or "".
func reservedName(name string) string {
	for prefix := range reservedNames {
		if strings.HasPrefix(name, prefix) {
			return prefix
		}
	}
	return ""
}

// checkPrincipal checks one principal and keeps its token's hash.
func (c *Config) checkPrincipal(p *Principal) error {
	switch {
	case p.Name == "" || p.Tenant == "":
		return c.errorf(p.line, "principal needs a name and a tenant")
	case reservedName(p.Name) != "":
		return c.errorf(p.line, "principal %q: names beginning with %q are %s", p.Name, reservedName(p.Name),
			reservedNames[reservedName(p.Name)])
	case strings.Contains(p.Tenant, ":"):
		// The upstream sees "<tenant>:<key>" (UpstreamKey): a colon in a
		// tenant would let tenant "a:b" and key "c" meet tenant "a", key "b:c".
		return c.errorf(p.line, "principal %q: tenant %q may not contain ':'", p.Name, p.Tenant)
	case p.CertSubject != "" && (c.TLS == nil || c.TLS.ClientCA == ""):
		return c.errorf(p.line, "principal %q: cert_subject needs tls.client_ca (client certificates)", p.Name)
	case p.CertSubject != "" && !strings.Contains(p.CertSubject, "="):
		return c.errorf(p.line, "principal %q: cert_subject %q: want a distinguished name, CN=…,O=…", p.Name,
			p.CertSubject)
	case p.CertSubject != "" && !isCanonicalSubject(p.CertSubject):
		canon, _ := canonicalSubject(p.CertSubject)
		return c.errorf(p.line, "principal %q: cert_subject %q would never match: it is compared with the "+
			"certificate's RDNs as RFC 2253 writes them (the last first, upper-case types, no spaces, the values of "+
			"one RDN sorted): write %q", p.Name, p.CertSubject, canon)
	case p.TokenSHA256 == "" && p.CertSubject != "":
		return nil // the certificate alone
	}
	h, err := hex.DecodeString(p.TokenSHA256)
	if err != nil || len(h) != 32 {
		return c.errorf(p.line, "principal %q: token_sha256 must be 64 hex digits (sha256 of the token)", p.Name)
	}
	p.hash = h
	return nil
}

// HasRole reports whether the principal holds role.
func (p *Principal) HasRole(role string) bool { return slices.Contains(p.Roles, role) }

// TokenHash is the SHA-256 of the principal's token (nil: it has none),
// which a presented token's hash is compared with in constant time.
func (p *Principal) TokenHash() []byte { return p.hash }
