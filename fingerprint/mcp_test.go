package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestOfMCP pins the fingerprint of a tool call to docs/design.md's form:
// the RFC 8785 JSON of server, tool, tenant and arguments, so that the
// same call fingerprints alike however its members are ordered or its
// numbers written, and another server, tool, tenant or argument does not.
func TestOfMCP(t *testing.T) {
	args := func(s string) any {
		v, err := Parse([]byte(s), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	got, err := OfMCP("tickets", "create_ticket", "acme", args(`{"title":"x","n":1.0}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(`{"arguments":{"n":1,"title":"x"},"mcp":"tickets","tenant":"acme","tool":"create_ticket"}`))
	if want := Prefix + hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("fingerprint %s, want %s", got, want)
	}
	same, _ := OfMCP("tickets", "create_ticket", "acme", args(`{ "n":1, "title":"x" }`))
	if same != got {
		t.Fatal("the same arguments, written otherwise, fingerprint differently")
	}
	for _, other := range [][4]string{
		{"billing", "create_ticket", "acme", `{"title":"x","n":1}`},
		{"tickets", "close_ticket", "acme", `{"title":"x","n":1}`},
		{"tickets", "create_ticket", "globex", `{"title":"x","n":1}`},
		{"tickets", "create_ticket", "acme", `{"title":"y","n":1}`},
	} {
		fp, _ := OfMCP(other[0], other[1], other[2], args(other[3]))
		if fp == got {
			t.Errorf("%v fingerprints as the original call", other)
		}
	}
	if _, err := OfMCP("", "t", "acme", nil); err == nil {
		t.Error("a call without its server was fingerprinted")
	}
}
