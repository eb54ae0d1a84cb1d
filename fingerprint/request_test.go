package fingerprint_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"regexp"
	"strings"
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
	sum := sha256.Sum256([]byte(`{"command":{"priority":2,"title":"Disk full"},"method":"POST",` +
		`"params":{},"query":{},"route":"/v1/tickets","tenant":"acme"}`))
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
		"params":  func(r *fingerprint.Request) { r.Params = map[string]string{"id": "T-7"} },
		"query":   func(r *fingerprint.Request) { r.Query = map[string][]string{"dry_run": {"true"}} },
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

// TestFingerprintPinned pins the fingerprint of a request with every member
// to the hash of its canonical document, written out by hand; the hash is
// printf '%s' DOC | sha256sum. Changing the document is changing every
// stored fingerprint: this test must then be changed on purpose.
func TestFingerprintPinned(t *testing.T) {
	const doc = `{"command":{"amount_minor":1999,"currency":"eur"},"headers":{"x-region":"eu"},"method":"POST",` +
		`"params":{"id":"pi_1"},"query":{"dry_run":["true"],"expand":["customer","invoice"]},` +
		`"route":"/v1/payment-intents/{id}/capture","tenant":"acme"}`
	const want = "sha256:64f75fbd1b407f48106aef1dde0e9c814b74102c15c489c1a5fc777eb39ae60e"
	if sum := sha256.Sum256([]byte(doc)); "sha256:"+hex.EncodeToString(sum[:]) != want {
		t.Fatal("the pinned hash is not the hash of the pinned document")
	}
	got, err := fingerprint.Of(fingerprint.Request{Method: "post", Route: "/v1/payment-intents/{id}/capture",
		Params: map[string]string{"id": "pi_1"}, Query: url.Values{"expand": {"customer", "invoice"}, "dry_run": {"true"}},
		Tenant: "acme", Command: mustParse(t, `{"currency":"eur","amount_minor":1999}`),
		Headers: map[string]string{"X-Region": "eu"}})
	if err != nil || got != want {
		t.Fatalf("fingerprint %s, %v; want %s", got, err, want)
	}
}

// TestFingerprintTarget: the concrete target and the query are bound to the
// key, not only the route template.
func TestFingerprintTarget(t *testing.T) {
	base := fingerprint.Request{Method: "POST", Route: "/v1/payment-intents/{id}/capture", Tenant: "acme",
		Params: map[string]string{"id": "1"}}
	of := func(mutate func(*fingerprint.Request)) string {
		t.Helper()
		r := base
		mutate(&r)
		fp, err := fingerprint.Of(r)
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	a := of(func(*fingerprint.Request) {})
	for name, mutate := range map[string]func(*fingerprint.Request){
		"other parameter": func(r *fingerprint.Request) { r.Params = map[string]string{"id": "2"} },
		"dry run":         func(r *fingerprint.Request) { r.Query, _ = url.ParseQuery("dry_run=true") },
		"empty value":     func(r *fingerprint.Request) { r.Query = map[string][]string{"dry_run": {""}} },
	} {
		if of(mutate) == a {
			t.Errorf("%s: same fingerprint", name)
		}
	}
	ab := of(func(r *fingerprint.Request) { r.Query, _ = url.ParseQuery("tag=a&tag=b") })
	ba := of(func(r *fingerprint.Request) { r.Query, _ = url.ParseQuery("tag=b&tag=a") })
	if ab == ba {
		t.Error("query values in another order: same fingerprint")
	}
	for name, mutate := range map[string]func(*fingerprint.Request){
		"query {}":           func(r *fingerprint.Request) { r.Query = url.Values{} },
		"name without value": func(r *fingerprint.Request) { r.Query = map[string][]string{"x": nil} },
	} {
		if of(mutate) != a {
			t.Errorf("%s changed the fingerprint", name)
		}
	}
	noParams := of(func(r *fingerprint.Request) { r.Params = nil })
	if noParams != of(func(r *fingerprint.Request) { r.Params = map[string]string{} }) {
		t.Error("nil and empty params differ")
	}
	bad := base
	bad.Query = map[string][]string{"q": {"\xff"}}
	if _, err := fingerprint.Of(bad); err == nil || !strings.Contains(err.Error(), "/query/q/0") {
		t.Errorf("invalid UTF-8 in the query: %v", err)
	}
}
