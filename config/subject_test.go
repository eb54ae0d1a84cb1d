package config

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"testing"
)

// TestCanonicalSubject: the subject certSubject writes of any
// certificate is its own canonical form (so a cert_subject copied from a
// certificate is accepted), other spellings of the same RDN sequence are
// read to that form, and another order of the RDNs is another subject.
func TestCanonicalSubject(t *testing.T) {
	cn := asn1.ObjectIdentifier{2, 5, 4, 3}
	names := []pkix.Name{
		{CommonName: "bot", Organization: []string{"acme"}},
		{CommonName: "a,b+c\"d\\e<f>g;h", Organization: []string{" lead", "trail "}},
		{CommonName: "#hash", OrganizationalUnit: []string{"ops", "eu"}, Country: []string{"FR"},
			Locality: []string{"Paris"}, Province: []string{"IDF"}, StreetAddress: []string{"1 rue"},
			PostalCode: []string{"75001"}, SerialNumber: "42"},
		{ExtraNames: []pkix.AttributeTypeAndValue{{Type: cn, Value: "x"}, {Type: cn, Value: "y"}}},
	}
	for _, n := range names {
		subject := CertSubject(certificate(t, n))
		if subject == "" {
			t.Fatalf("%s: no subject", n)
		}
		if canon, ok := canonicalSubject(subject); ok && canon != subject {
			t.Errorf("%s read as %s", subject, canon)
		}
		if !isCanonicalSubject(subject) {
			t.Errorf("%s refused", subject)
		}
	}
	for in, want := range map[string]string{
		"O=acme,CN=bot":        "O=acme,CN=bot", // another sequence, not a misspelling
		"cn=bot, o=acme":       "CN=bot,O=acme",
		"OU=eu,OU=ops,CN=x":    "OU=eu,OU=ops,CN=x",
		"OU=ops+OU=eu,CN=x":    "OU=eu+OU=ops,CN=x",
		`CN=a\,b ,O=acme`:      `CN=a\,b,O=acme`,
		"O=acme+C=FR,CN=bot":   "C=FR+O=acme,CN=bot",
		"SERIALNUMBER=7,CN=x":  "SERIALNUMBER=7,CN=x",
		"CN=a,CN=b":            "CN=a,CN=b",
		"CN=admin,CN=bot,O=ac": "CN=admin,CN=bot,O=ac",
	} {
		if got, ok := canonicalSubject(in); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", in, got, ok, want)
		}
	}
	for _, unjudged := range []string{"1.2.3.4=#0c0178,CN=x", "CN=", "X=1", `CN=a\`} {
		if _, ok := canonicalSubject(unjudged); ok {
			t.Errorf("%s was judged", unjudged)
		}
	}
}

// certificate is a self-signed certificate of subject.
func certificate(t *testing.T, subject pkix.Name) *x509.Certificate {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: subject}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
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
