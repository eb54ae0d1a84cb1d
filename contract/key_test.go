package contract

import (
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	good := map[string]string{
		"abc":                                "abc",
		"task-42/create ticket":              "task-42/create ticket",
		`"quoted"`:                           "quoted",
		`"with \"escape\" and \\"`:           `with "escape" and \`,
		strings.Repeat("k", 255):             strings.Repeat("k", 255),
		`"` + strings.Repeat("k", 255) + `"`: strings.Repeat("k", 255),
	}
	for in, want := range good {
		if got, err := ParseKey(in); err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", `""`, strings.Repeat("k", 256), "caf\u00e9", "tab\there", "nul\x00",
		`"open`, `"bad \x escape"`, `"inner " quote"`, "\x7f"} {
		if got, err := ParseKey(in); err == nil {
			t.Errorf("ParseKey(%q) = %q, want an error", in, got)
		}
	}
}

// FuzzParseKey: whatever is accepted is 1-255 printable ASCII, and quoting
// an accepted bare key round-trips.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"q"`, `"a\"b"`, `"`, `\`, "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := ParseKey(in)
		if err != nil {
			return
		}
		if len(key) == 0 || len(key) > 255 {
			t.Fatalf("accepted %q of length %d", key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("accepted byte 0x%02x", key[i])
			}
		}
		if key[0] != '"' {
			quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
			if again, err := ParseKey(quoted); (err == nil) != (len(key) <= 255) || (err == nil && again != key) {
				t.Fatalf("quoting %q gives %q, %v", key, again, err)
			}
		}
	})
}
