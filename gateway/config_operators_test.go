package gateway

import (
	"strings"
	"testing"
)

// TestOperatorsConfig: operators: names configured principals; a name no
// principal has (a JWT's, a typo) is refused at its line; IsOperator
// holds for the principal of that name and tenant only.
func TestOperatorsConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	cfg, err := ParseConfig("gw.yaml", []byte(goodConfig+"operators: [support-agent]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.IsOperator("support-agent", "acme") || cfg.IsOperator("support-agent", "globex") ||
		cfg.IsOperator("jwt:support-agent", "acme") {
		t.Fatal("IsOperator does not say who the operator is")
	}
	if cfg, _ := ParseConfig("gw.yaml", []byte(goodConfig)); cfg.IsOperator("support-agent", "acme") {
		t.Fatal("an operator without operators:")
	}
	for _, name := range []string{"nobody", "jwt:alice"} {
		_, err := ParseConfig("gw.yaml", []byte(goodConfig+"operators: ["+name+"]\n"))
		if err == nil || !strings.Contains(err.Error(), "gw.yaml:20: operators: \""+name+"\" is no configured principal") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
