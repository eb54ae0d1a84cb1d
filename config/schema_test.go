package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSchemaDefaultsMustBeExact: a default the fingerprint parser would
// refuse stops start-up with its location, instead of being skipped.
func TestSchemaDefaultsMustBeExact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	bad := `{"type":"object","properties":{"amount":{"type":"number","default":0.10000000000000000001}}}`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadSchema(path)
	if err == nil || !strings.Contains(err.Error(), "/properties/amount/default") {
		t.Fatalf("an inexact default: %v", err)
	}
	good := strings.Replace(bad, "0.10000000000000000001", "0.1", 1)
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := loadSchema(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := v(map[string]any{})
	if err != nil || cmd.(map[string]any)["amount"] == nil {
		t.Fatalf("the default was not applied: %v, %v", cmd, err)
	}
}

// TestBodySetting: body takes only opaque.
func TestBodySetting(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	text := strings.Replace(goodConfig, "    lease: 30s", "    lease: 30s\n    body: xml", 1)
	if _, err := Parse("gw.yaml", []byte(text)); err == nil || !strings.Contains(err.Error(), `gw.yaml:12: route POST /v1/tickets: body "xml"`) {
		t.Fatalf("body: xml: %v", err)
	}
	text = strings.Replace(goodConfig, "    lease: 30s", "    lease: 30s\n    body: opaque", 1)
	if _, err := Parse("gw.yaml", []byte(text)); err != nil {
		t.Fatalf("body: opaque: %v", err)
	}
}
