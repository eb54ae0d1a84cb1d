package gateway

import (
	"crypto/x509/pkix"
	"testing"
)

// TestCanonicalSubject: every subject Go writes is its own canonical form
// (so a cert_subject copied from a certificate is accepted), and other
// spellings of it are read to that form.
func TestCanonicalSubject(t *testing.T) {
	names := []pkix.Name{
		{CommonName: "bot", Organization: []string{"acme"}},
		{CommonName: "a,b+c\"d\\e<f>g;h", Organization: []string{" lead", "trail "}},
		{CommonName: "#hash", OrganizationalUnit: []string{"ops", "eu"}, Country: []string{"FR"},
			Locality: []string{"Paris"}, Province: []string{"IDF"}, StreetAddress: []string{"1 rue"},
			PostalCode: []string{"75001"}, SerialNumber: "42"},
	}
	for _, n := range names {
		if canon, ok := canonicalSubject(n.String()); ok && canon != n.String() {
			t.Errorf("%s read as %s", n.String(), canon)
		}
		if !isCanonicalSubject(n.String()) {
			t.Errorf("%s refused", n.String())
		}
	}
	for in, want := range map[string]string{
		"O=acme,CN=bot":       "CN=bot,O=acme",
		"cn=bot, o=acme":      "CN=bot,O=acme",
		"OU=eu,OU=ops,CN=x":   "CN=x,OU=eu+OU=ops",
		`CN=a\,b ,O=acme`:     `CN=a\,b,O=acme`,
		"C=FR+O=acme,CN=bot":  "CN=bot,O=acme,C=FR",
		"SERIALNUMBER=7,CN=x": "SERIALNUMBER=7,CN=x",
	} {
		if got, ok := canonicalSubject(in); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", in, got, ok, want)
		}
	}
	for _, unjudged := range []string{"1.2.3.4=#0c0178,CN=x", "CN=a,CN=b", "CN=", "X=1", `CN=a\`} {
		if _, ok := canonicalSubject(unjudged); ok {
			t.Errorf("%s was judged", unjudged)
		}
	}
}

// FuzzCanonicalSubject: any text is read without a panic, and a canonical
// form is its own.
func FuzzCanonicalSubject(f *testing.F) {
	for _, s := range []string{"CN=bot,O=acme", "O=a+OU=b, cn = x", `CN=a\,b\+c`, "#x", "CN=\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		canon, ok := canonicalSubject(s)
		if !ok {
			return
		}
		if again, ok := canonicalSubject(canon); !ok || again != canon {
			t.Fatalf("%q read as %q, which reads as %q %v", s, canon, again, ok)
		}
	})
}
