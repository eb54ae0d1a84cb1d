package config

import (
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Auth is the auth section: ways to authenticate a caller besides
// the principals' static token hashes (docs/design.md, "Identity,
// transport and operations").
type Auth struct {
	// JWT accepts OAuth 2 / OIDC access tokens signed by one issuer.
	JWT *JWT `yaml:"jwt"`
}

// JWT is auth.jwt: the issuer whose signed tokens are principals,
// and the claims that name the principal's tenant, roles and name.
type JWT struct {
	// Issuer is the tokens' iss, exactly; Audience must be one of their aud.
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// JWKSURL is where the issuer publishes its public keys.
	JWKSURL string `yaml:"jwks_url"`
	// TenantClaim (required), RolesClaim (default roles) and NameClaim
	// (default sub) are claim names, or dotted paths into nested claims
	// (realm_access.roles); a name that is itself a claim wins over a path.
	TenantClaim string `yaml:"tenant_claim"`
	RolesClaim  string `yaml:"roles_claim"`
	NameClaim   string `yaml:"name_claim"`
	// Leeway is the clock skew allowed on exp and nbf (30s when not
	// written; leeway: 0s, written, is none).
	Leeway time.Duration `yaml:"leeway"`
	// MinRefresh is the shortest time between two fetches of the JWKS
	// (10s): an unknown kid makes one fetch at most that often, so that
	// tokens with invented kids cannot make a fetch per request.
	MinRefresh time.Duration `yaml:"min_refresh"`
	// MaxAge is how long a fetched JWKS is used before it is fetched again
	// (1h): a key the issuer withdrew stops verifying within it.
	MaxAge time.Duration `yaml:"max_age"`
	// Algorithms are the signature algorithms accepted (RS256, RS384,
	// RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA by default);
	// only Asymmetric ones can be listed: a token signed with a shared
	// secret, or with none, is refused.
	Algorithms []string `yaml:"algorithms"`

	line int
	keys map[string]int   // the lines of the keys written, to tell 0s from unset
	now  func() time.Time // the configuration's clock (Config.Clock)
	// allows, the configuration's, says whether a token's tenant is one
	// the gateway serves (tenants:).
	allows func(tenant string) bool
}

// WithClock is j reading now: a JWT configuration made by hand (a
// test's, with a clock it moves).
func (j *JWT) WithClock(now func() time.Time) *JWT {
	j.now = now
	return j
}

// Clock is the time the checks read: the configuration's clock, or
// time.Now for a JWT made by hand.
func (j *JWT) Clock() time.Time {
	if j.now != nil {
		return j.now()
	}
	return time.Now()
}

// JWTPrefix begins the name of every principal a JWT authenticates
// ("jwt:" and the name claim's value): a configured principal's name may
// not begin with it, so that a token's subject never takes the name, and
// the keys (MCP intents), approvals and sessions, of a static principal.
const JWTPrefix = "jwt:"

// Asymmetric are the algorithms a JWT may be signed with.
var Asymmetric = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// checkAuth validates auth.jwt and fills its defaults.
func (c *Config) checkAuth() error {
	j := c.Auth.JWT
	if j == nil {
		return nil
	}
	iss, err := url.Parse(j.Issuer)
	switch {
	case j.Issuer == "" || err != nil || iss.Scheme == "":
		return c.errorf(j.line, "auth.jwt: issuer %q: want the tokens' iss, a URL", j.Issuer)
	case j.Audience == "":
		return c.errorf(j.line, "auth.jwt: audience is required (one of the tokens' aud)")
	case !isHTTPURL(j.JWKSURL):
		return c.errorf(j.line, "auth.jwt: jwks_url %q: want https://host/path", j.JWKSURL)
	case !SecureOrLoopback(j.JWKSURL):
		// Keys fetched in clear can be swapped on the way: whoever does it
		// signs tokens for any tenant.
		return c.errorf(j.line, "auth.jwt: jwks_url %q: want https (plain http only to a loopback address)", j.JWKSURL)
	case strings.TrimSpace(j.TenantClaim) == "":
		return c.errorf(j.line, "auth.jwt: tenant_claim is required (the claim that names the caller's tenant)")
	case j.Leeway < 0 || j.MinRefresh < 0 || j.MaxAge < 0:
		return c.errorf(j.line, "auth.jwt: leeway, min_refresh and max_age must be positive")
	}
	for _, a := range j.Algorithms {
		if !slices.Contains(Asymmetric, a) {
			return c.errorf(j.line, "auth.jwt: algorithm %q: want one of %s", a, strings.Join(Asymmetric, ", "))
		}
	}
	j.defaults()
	j.now, j.allows = c.now, c.allows
	return nil
}

func (j *JWT) defaults() {
	if j.RolesClaim == "" {
		j.RolesClaim = "roles"
	}
	if j.NameClaim == "" {
		j.NameClaim = "sub"
	}
	if _, written := j.keys["leeway"]; j.Leeway == 0 && !written {
		j.Leeway = 30 * time.Second
	}
	if j.MinRefresh == 0 {
		j.MinRefresh = 10 * time.Second
	}
	if j.MaxAge == 0 {
		j.MaxAge = time.Hour
	}
	if len(j.Algorithms) == 0 {
		j.Algorithms = Asymmetric
	}
}

// SecureOrLoopback reports whether a URL is https, or http to a loopback
// address (an identity provider's sidecar, a test's).
func SecureOrLoopback(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	if u.Scheme == "https" {
		return true
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
