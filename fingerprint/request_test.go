package fingerprint_test

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"testing"

	"github.com/idemgate/idemgate/fingerprint"
)

func mustParse(t *testing.T, s string) any {
	t.Helper()
	v, err := fingerprint.Parse([]byte(s), fingerprint.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestFingerprintIsOfMeaningNotBytes(t *testing.T) {
	base := fingerprint.Request{Method: "post", Route: "/v1/tickets", Tenant: "acme",
		Command: mustParse(t, `{"title":"Disk full","priority":2}`)}
	a, err := fingerprint.Of(base)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(a) {
		t.Fatalf("bad format %q", a)
	}
	same := base
	same.Method = "POST"
	same.Command = mustParse(t, "{ \"priority\" : 2.0,\n \"title\":\"Disk full\" }")
	if b, _ := fingerprint.Of(same); b != a {
		t.Errorf("reordered, respaced body changed the fingerprint")
	}
	// The format is a contract shared with other implementations (the CLI,
	// agents computing fingerprints ahead of time): the hash of exactly this
	// canonical document.
	sum := sha256.Sum256([]byte(`{"command":{"priority":2,"title":"Disk full"},"method":"POST","route":"/v1/tickets","tenant":"acme"}`))
	if want := "sha256:" + hex.EncodeToString(sum[:]); a != want {
		t.Fatalf("fingerprint %s, want %s", a, want)
	}
	changes := map[string]fingerprint.Request{}
	for name, mutate := range map[string]func(*fingerprint.Request){
		"tenant":  func(r *fingerprint.Request) { r.Tenant = "globex" },
		"route":   func(r *fingerprint.Request) { r.Route = "/v1/incidents" },
		"method":  func(r *fingerprint.Request) { r.Method = "PUT" },
		"command": func(r *fingerprint.Request) { r.Command = mustParse(t, `{"title":"Disk full","priority":3}`) },
		"headers": func(r *fingerprint.Request) { r.Headers = map[string]string{"X-Region": "eu"} },
		"no body": func(r *fingerprint.Request) { r.Command = nil },
	} {
		r := base
		mutate(&r)
		changes[name] = r
	}
	seen := map[string]string{a: "base"}
	for name, r := range changes {
		fp, err := fingerprint.Of(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if prev, dup := seen[fp]; dup {
			t.Errorf("changing %s gives the same fingerprint as %s", name, prev)
		}
		seen[fp] = name
	}
}

func TestFingerprintHeaders(t *testing.T) {
	r := fingerprint.Request{Method: "POST", Route: "/r", Tenant: "t", Headers: map[string]string{"X-Region": "eu"}}
	a, _ := fingerprint.Of(r)
	r.Headers = map[string]string{"x-region": "eu"}
	if b, _ := fingerprint.Of(r); a != b {
		t.Error("header name case changed the fingerprint")
	}
	r.Headers = map[string]string{"x-region": "eu", "X-Region": "us"}
	if _, err := fingerprint.Of(r); err == nil {
		t.Error("a header named twice was accepted")
	}
	if _, err := fingerprint.Of(fingerprint.Request{Method: "POST", Route: "/r"}); err == nil {
		t.Error("a request without tenant was accepted")
	}
}
