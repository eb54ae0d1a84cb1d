package config

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on what a token's claims may make of a principal: what is
// stored with every operation and shown on the web page stays small.
const (
	maxClaimValue = 256
	maxRoles      = 64
)

// PrincipalOf maps a verified token's claims to its principal: the tenant
// from tenant_claim (required), the roles from roles_claim (an array of
// strings, or one string of roles separated by spaces, as OAuth 2's
// scope is; absent: none), and the name from name_claim, prefixed with
// JWTPrefix. Anything else (a number for a tenant, a role that is not a
// string, a control character) refuses the token: a principal is never
// guessed from a claim that does not say what it should.
func (j *JWT) PrincipalOf(claims map[string]any) (*Principal, error) {
	tenant, err := claimString(claims, j.TenantClaim)
	if err != nil {
		return nil, err
	}
	if strings.Contains(tenant, ":") {
		// As for a configured tenant: the upstream sees "<tenant>:<key>".
		return nil, fmt.Errorf("claim %s: a tenant may not contain ':'", j.TenantClaim)
	}
	if j.allows != nil && !j.allows(tenant) {
		return nil, fmt.Errorf("claim %s: not one of this gateway's tenants (tenants:)", j.TenantClaim)
	}
	name, err := claimString(claims, j.NameClaim)
	if err != nil {
		return nil, err
	}
	roles, err := claimRoles(claims, j.RolesClaim)
	if err != nil {
		return nil, err
	}
	return &Principal{Name: JWTPrefix + name, Tenant: tenant, Roles: roles, jwt: j.identity()}, nil
}

// identity is what of auth.jwt decides which principal a token is: its
// issuer and keys, its audience, its algorithms and the claims read. Its
// leeway and the JWKS's pace do not.
func (j *JWT) identity() string {
	return strings.Join([]string{j.Issuer, j.Audience, j.JWKSURL, j.TenantClaim, j.RolesClaim, j.NameClaim,
		strings.Join(j.Algorithms, " ")}, "\x00")
}

// claim finds a claim by its name, or, if no claim has that name, by a
// dotted path through nested objects (realm_access.roles).
func claim(claims map[string]any, path string) (any, bool) {
	if v, ok := claims[path]; ok {
		return v, true
	}
	var cur any = claims
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// claimString is a required claim holding a string fit to name a
// tenant or a principal.
func claimString(claims map[string]any, path string) (string, error) {
	v, ok := claim(claims, path)
	if !ok {
		return "", fmt.Errorf("no claim %s", path)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("claim %s is not a string", path)
	}
	if err := checkValue(s); err != nil {
		return "", fmt.Errorf("claim %s: %w", path, err)
	}
	return s, nil
}

// claimRoles reads the roles: an array of strings, or a string of roles
// separated by spaces; an absent claim is no role.
func claimRoles(claims map[string]any, path string) ([]string, error) {
	v, ok := claim(claims, path)
	if !ok {
		return nil, nil
	}
	var roles []string
	switch v := v.(type) {
	case string:
		roles = strings.Fields(v)
	case []any:
		for _, r := range v {
			s, ok := r.(string)
			if !ok {
				return nil, fmt.Errorf("claim %s: a role that is not a string", path)
			}
			roles = append(roles, s)
		}
	default:
		return nil, fmt.Errorf("claim %s: want an array of strings or a string", path)
	}
	if len(roles) > maxRoles {
		return nil, fmt.Errorf("claim %s: more than %d roles", path, maxRoles)
	}
	for _, r := range roles {
		if err := checkValue(r); err != nil {
			return nil, fmt.Errorf("claim %s: %w", path, err)
		}
	}
	return roles, nil
}

// checkValue refuses an empty, long, invalid or invisible value.
func checkValue(s string) error {
	switch {
	case s == "" || strings.TrimSpace(s) != s:
		return errors.New("empty, or spaces around it")
	case len(s) > maxClaimValue:
		return fmt.Errorf("longer than %d bytes", maxClaimValue)
	case !utf8.ValidString(s):
		return errors.New("not UTF-8")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return errors.New("a control character")
	}
	return nil
}
