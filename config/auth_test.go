package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var claimConfig = &JWT{TenantClaim: "org", RolesClaim: "realm_access.roles", NameClaim: "sub"}

// TestClaimMapping: the tenant, the roles and the name come from the
// configured claims, nested paths included; a claim that is not what it
// should be refuses the token.
func TestClaimMapping(t *testing.T) {
	for _, c := range []struct {
		claims, want string // want: "name tenant role,role", or "!error"
	}{
		{`{"sub":"alice","org":"acme","realm_access":{"roles":["a","b"]}}`, "jwt:alice acme a,b"},
		{`{"sub":"alice","org":"acme","realm_access":{"roles":"a  b"}}`, "jwt:alice acme a,b"},
		{`{"sub":"alice","org":"acme","realm_access.roles":["lit"]}`, "jwt:alice acme lit"},
		{`{"sub":"alice","org":"acme"}`, "jwt:alice acme "},
		{`{"sub":"alice"}`, "!no claim org"},
		{`{"sub":"alice","org":7}`, "!claim org is not a string"},
		{`{"sub":"alice","org":""}`, "!empty"},
		{`{"sub":"alice","org":" acme"}`, "!spaces"},
		{`{"sub":"alice","org":"a:b"}`, "!may not contain ':'"},
		{`{"sub":"alice","org":"a\u0000b"}`, "!control character"},
		{`{"sub":"` + strings.Repeat("x", 257) + `","org":"acme"}`, "!longer than"},
		{`{"org":"acme"}`, "!no claim sub"},
		{`{"sub":"alice","org":"acme","realm_access":{"roles":[1]}}`, "!not a string"},
		{`{"sub":"alice","org":"acme","realm_access":{"roles":{"a":1}}}`, "!want an array"},
		{`{"sub":"alice","org":"acme","realm_access":["x"]}`, "jwt:alice acme "},
	} {
		var claims map[string]any
		if err := json.Unmarshal([]byte(c.claims), &claims); err != nil {
			t.Fatal(err)
		}
		p, err := claimConfig.PrincipalOf(claims)
		got := ""
		if err != nil {
			got = "!" + err.Error()
		} else {
			got = p.Name + " " + p.Tenant + " " + strings.Join(p.Roles, ",")
		}
		if got != c.want && !(strings.HasPrefix(c.want, "!") && strings.Contains(got, c.want[1:])) {
			t.Errorf("%s: got %q, want %q", c.claims, got, c.want)
		}
	}
}

// FuzzClaimMapping: any JSON object of claims maps to a principal whose
// every value obeys the bounds, or to an error; never a panic, never a
// name without the JWT prefix.
func FuzzClaimMapping(f *testing.F) {
	f.Add(`{"sub":"alice","org":"acme","realm_access":{"roles":["a","b"]}}`, "org", "realm_access.roles")
	f.Add(`{"sub":"a","org":"x","roles":"r1 r2"}`, "org", "roles")
	f.Add(`{"a":{"b":{"c":"t"}},"sub":"s"}`, "a.b.c", "a..b")
	f.Fuzz(func(t *testing.T, doc, tenantClaim, rolesClaim string) {
		var claims map[string]any
		if json.Unmarshal([]byte(doc), &claims) != nil || tenantClaim == "" || rolesClaim == "" {
			return
		}
		j := &JWT{TenantClaim: tenantClaim, RolesClaim: rolesClaim, NameClaim: "sub"}
		p, err := j.PrincipalOf(claims)
		if err != nil {
			return
		}
		if !strings.HasPrefix(p.Name, JWTPrefix) || strings.Contains(p.Tenant, ":") || len(p.Roles) > maxRoles {
			t.Fatalf("%+v from %s", p, doc)
		}
		for _, v := range append([]string{p.Name[len(JWTPrefix):], p.Tenant}, p.Roles...) {
			if checkValue(v) != nil {
				t.Fatalf("value %q from %s", v, doc)
			}
		}
	})
}

// TestAuthConfig: auth.jwt's mistakes are refused at its line.
func TestAuthConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	good := "auth:\n  jwt: {issuer: https://idp.example, audience: idemgate, jwks_url: https://idp.example/jwks, " +
		"tenant_claim: org%s}\n"
	cfg, err := Parse("gw.yaml", []byte(goodConfig+fmt.Sprintf(good, "")))
	if err != nil {
		t.Fatal(err)
	}
	j := cfg.Auth.JWT
	if j.NameClaim != "sub" || j.RolesClaim != "roles" || j.Leeway != 30*time.Second ||
		!slices.Equal(j.Algorithms, Asymmetric) {
		t.Fatalf("defaults: %+v", j)
	}
	for extra, want := range map[string]string{
		", issuer: ''":                          "gw.yaml:21: auth.jwt: issuer",
		", audience: ''":                        "audience is required",
		", jwks_url: file:///x":                 "jwks_url",
		", jwks_url: 'http://idp.example/jwks'": "want https (plain http only to a loopback address)",
		", jwks_url: 'http://127.0.0.1:9/jwks'": "",
		", jwks_url: 'http://[::1]:9/jwks'":     "",
		", jwks_url: 'http://localhost:9/jwks'": "",
		", tenant_claim: ''":                    "tenant_claim is required",
		", algorithms: [HS256]":                 `algorithm "HS256"`,
		", algorithms: [none]":                  `algorithm "none"`,
		", leeway: -1s":                         "must be positive",
		", surprise: 1":                         `unknown key "surprise"`,
		", min_refresh: -1s":                    "must be positive",
		", algorithms: [RS256]":                 "",
		", roles_claim: a.b.c":                  "",
		", name_claim: email":                   "",
		", max_age: 5m":                         "",
	} {
		text := goodConfig + fmt.Sprintf(good, extra)
		if key, _, _ := strings.Cut(strings.TrimPrefix(extra, ", "), ":"); strings.Contains(good, key+": ") {
			// the setting replaces the good one
			i := strings.Index(text, key+": ")
			j := strings.Index(text[i:], ",")
			text = text[:i] + text[i+j+1:]
		}
		_, err := Parse("gw.yaml", []byte(text))
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", extra, err, want)
		}
	}
}

// TestReservedPrincipalNames: a configured principal may not take a name
// idemgate gives its own principals (a JWT's, a webhook route's, a
// consumer's), or it would be one of them for approvals, intents and the
// audit log.
func TestReservedPrincipalNames(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	for _, name := range []string{"jwt:alice", "webhook:/hooks/stripe", "consumer:billing"} {
		text := strings.Replace(goodConfig, "{name: support-agent,", "{name: '"+name+"',", 1)
		_, err := Parse("gw.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), "gw.yaml:10: principal \""+name+"\": names beginning with") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
