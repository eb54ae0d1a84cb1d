package keyed

import (
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/internal/jsonptr"
)

// KeyValue is the value at a policy's business or concurrency key (a JSON
// Pointer's tokens) in a command, as a key: a string as it is, any other
// value as its canonical JSON; "" when absent, null or unset (toks nil).
func KeyValue(command any, toks []string) string {
	if toks == nil {
		return ""
	}
	v, ok := jsonptr.Get(command, toks)
	if !ok || v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	b, err := fingerprint.Canonical(v)
	if err != nil {
		return ""
	}
	return string(b)
}
