package fingerprint_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/fingerprint"
)

// FuzzCanonicalize checks, for any input: the parser is never more lenient
// than encoding/json; what it accepts canonicalizes, the same with rounding;
// and the canonical form is valid JSON that canonicalizes to itself.
func FuzzCanonicalize(f *testing.F) {
	for _, seed := range []string{
		`{"b":1e30,"a":[333333333.33333329]}`, `{"\ud83d\ude02":"x","\u00f6":[null,true,false]}`,
		`[1,-0,0.1,1e-7,1e21,9007199254740992]`, `[9007199254740993,0.10000000000000000001,1e-400]`,
		`"\u001f\t\"\\/"`, `{"a":{"a":{"a":[]}}}`,
		`{"a":1,"a":2}`, `"\ud800"`, "\"\xff\"", `[01]`, `1e400`,
		`{"environment":"staging","Environment":"production"}`, `{"s":1,"\u017f":2}`, `{"ß":1,"SS":2}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := fingerprint.Parse(data, fingerprint.Limits{MaxDepth: 32})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted what encoding/json refuses: %q", data)
		}
		if a, b, ok := foldedPair(v); ok {
			t.Fatalf("accepted %q and %q, which encoding/json takes for one member: %q", a, b, data)
		}
		canon, err := fingerprint.Canonical(v)
		if err != nil {
			t.Fatalf("parsed but cannot canonicalize %q: %v", data, err)
		}
		if !json.Valid(canon) {
			t.Fatalf("canonical form is not JSON: %q", canon)
		}
		// What the strict mode accepts, rounding leaves as it is.
		if rounded, err := fingerprint.Canonicalize(data, fingerprint.Limits{MaxDepth: 32, Rounding: true}); err != nil ||
			!bytes.Equal(rounded, canon) {
			t.Fatalf("rounding changed %q: %q, %v", canon, rounded, err)
		}
		again, err := fingerprint.Canonicalize(canon, fingerprint.Limits{MaxDepth: 32})
		if err != nil {
			t.Fatalf("canonical form %q refused: %v", canon, err)
		}
		if !bytes.Equal(again, canon) {
			t.Fatalf("not a fixed point:\n%q\n%q", canon, again)
		}
	})
}

// FuzzParseForm checks, for any input: ParseForm never panics; a refusal says
// why; and what it accepts, url.ParseQuery reads without error as the same
// names and values in the same order.
func FuzzParseForm(f *testing.F) {
	for _, seed := range []string{
		"a=1&b=2&a=3", "a=1&&b=2", "q=hello+world%21&%C3%A9=%E2%82%AC", "flag&=x&a=b=c", "a=1;b=2",
		"a=%zz", "a=%C3%28", "a=%", "%ED%A0%80=1", "expand[]=x&expand[]=y", "&", "",
		"environment=staging&Environment=production", "s=1&%C5%BF=2",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		form, err := fingerprint.ParseForm(data, fingerprint.Limits{})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		want, err := url.ParseQuery(string(data))
		if err != nil {
			t.Fatalf("accepted %q, which url.ParseQuery refuses: %v", data, err)
		}
		if len(form) != len(want) {
			t.Fatalf("%q: %d names, url.ParseQuery %d", data, len(form), len(want))
		}
		for name, values := range want {
			got, _ := form[name].([]any)
			if len(got) != len(values) {
				t.Fatalf("%q: %q has %v, url.ParseQuery %q", data, name, got, values)
			}
			for i, v := range values {
				if got[i] != v {
					t.Fatalf("%q: %q[%d] is %q, url.ParseQuery %q", data, name, i, got[i], v)
				}
			}
		}
		if _, err := fingerprint.Canonical(form); err != nil {
			t.Fatalf("%q: parsed but cannot canonicalize: %v", data, err)
		}
		if a, b, ok := foldedPair(form); ok {
			t.Fatalf("accepted fields %q and %q, one name to a case-insensitive decoder: %q", a, b, data)
		}
	})
}

// foldedPair finds, in any object of v, two member names that differ but
// are equal under strings.EqualFold (encoding/json's matching of names).
func foldedPair(v any) (string, string, bool) {
	switch v := v.(type) {
	case map[string]any:
		for a, x := range v {
			for b := range v {
				if a != b && strings.EqualFold(a, b) {
					return a, b, true
				}
			}
			if a, b, ok := foldedPair(x); ok {
				return a, b, true
			}
		}
	case []any:
		for _, x := range v {
			if a, b, ok := foldedPair(x); ok {
				return a, b, true
			}
		}
	}
	return "", "", false
}
