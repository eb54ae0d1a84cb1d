package config

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/limits"
)

// TestLimitsConfig: a tenant's settings override the default field by
// field, the built-in limits fill the rest, and a bad setting names its
// line.
func TestLimitsConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	text := goodConfig + "limits:\n  default: {rate: 100/s, burst: 200, max_stored: 1MiB}\n  tenants: {acme: {rate: 0, max_live: 5, max_pending_approvals: 7}}\n"
	cfg, err := Parse("gw.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Policy("acme"), (limits.Policy{Rate: 0, Burst: 200, MaxLive: 5, MaxStored: 1 << 20, MaxPending: 7}); got != want {
		t.Errorf("acme: %+v, want %+v", got, want)
	}
	if got, want := cfg.Policy("globex"), (limits.Policy{Rate: 100, Burst: 200, MaxLive: 10000, MaxStored: 1 << 20,
		MaxPending: 100}); got != want {
		t.Errorf("globex: %+v, want %+v", got, want)
	}
	bad := strings.Replace(text, "rate: 0,", "rate: fast,", 1)
	if _, err := Parse("gw.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), `gw.yaml:22: limits.tenants.acme: rate "fast"`) {
		t.Errorf("a bad rate: %v", err)
	}
}
