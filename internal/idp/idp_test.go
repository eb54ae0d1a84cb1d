package idp

import (
	"testing"
)

// TestNewKeyIsNeverGivenTwice: keys from the committed pool and past it
// are each handed out once, and are whole 2048-bit keys.
func TestNewKeyIsNeverGivenTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 40 { // past the 32 of keys.pem
		k, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if err := k.Validate(); err != nil || k.N.BitLen() != 2048 {
			t.Fatalf("a key of %d bits: %v", k.N.BitLen(), err)
		}
		if n := k.N.String(); seen[n] {
			t.Fatal("a key was given twice")
		} else {
			seen[n] = true
		}
	}
}
