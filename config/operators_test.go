package config

import (
	"slices"
	"strings"
	"testing"
)

// TestOperatorsConfig: operators: names configured principals; a name no
// principal has (a JWT's, a typo) is refused at its line; IsOperator
// holds for the principal of that name and tenant only.
func TestOperatorsConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	cfg, err := Parse("gw.yaml", []byte(goodConfig+"operators: [support-agent]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.IsOperator("support-agent", "acme") || cfg.IsOperator("support-agent", "globex") ||
		cfg.IsOperator("jwt:support-agent", "acme") {
		t.Fatal("IsOperator does not say who the operator is")
	}
	if cfg, _ := Parse("gw.yaml", []byte(goodConfig)); cfg.IsOperator("support-agent", "acme") {
		t.Fatal("an operator without operators:")
	}
	for _, name := range []string{"nobody", "jwt:alice"} {
		_, err := Parse("gw.yaml", []byte(goodConfig+"operators: ["+name+"]\n"))
		if err == nil || !strings.Contains(err.Error(), "gw.yaml:20: operators: \""+name+"\" is no configured principal") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTenantsConfig: tenants: names the tenants served: each must be a
// tenant's name, and, once written, every principal's tenant one of
// them; KnownTenants adds the configuration's own.
func TestTenantsConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	cfg, err := Parse("gw.yaml", []byte(goodConfig+"tenants: [globex, acme]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.KnownTenants(); !slices.Equal(got, []string{"acme", "globex"}) || !cfg.allows("globex") ||
		cfg.allows("initech") {
		t.Fatalf("known %v", got)
	}
	for text, want := range map[string]string{
		"tenants: [globex]\n":    `gw.yaml:10: principal "support-agent": tenant "acme" is not in tenants:`,
		"tenants: [\"a:b\"]\n":   `gw.yaml:20: tenants: "a:b": want a tenant's name`,
		"tenants: [\" acme\"]\n": `gw.yaml:20: tenants: " acme"`,
	} {
		if _, err := Parse("gw.yaml", []byte(goodConfig+text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
