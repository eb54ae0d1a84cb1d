package reconcile

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

func TestCompileRefuses(t *testing.T) {
	good := Config{Probe: "GET /v1/x/{{.params.id}}", Applied: "status == 200", NotApplied: "status == 404"}
	for name, c := range map[string]func(Config) Config{
		"a write":          func(c Config) Config { c.Probe = "POST /v1/x"; return c },
		"no path":          func(c Config) Config { c.Probe = "GET"; return c },
		"a bad template":   func(c Config) Config { c.Probe = "GET /v1/{{.params.id"; return c },
		"no applied":       func(c Config) Config { c.Applied = ""; return c },
		"not bool":         func(c Config) Config { c.Applied = "status + 1"; return c },
		"unknown variable": func(c Config) Config { c.NotApplied = "answer == 1"; return c },
	} {
		if _, err := Compile(c(good)); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
	if _, err := Compile(good); err != nil {
		t.Fatal(err)
	}
}

func TestRenderAndJudge(t *testing.T) {
	p, err := Compile(Config{Probe: "GET /v1/payments?reference={{.body.order_ref}}&n={{.params.n}}",
		Applied: "status == 200 && size(body.items) == 1", NotApplied: "status == 200 && size(body.items) == 0"})
	if err != nil {
		t.Fatal(err)
	}
	var body any
	_ = json.Unmarshal([]byte(`{"order_ref":"ord 7&x=1"}`), &body)
	got, err := p.Render(map[string]string{"n": "3"}, nil, body)
	if err != nil || got != "GET /v1/payments?reference=ord%207%26x%3D1&n=3" {
		t.Fatalf("render: %q %v", got, err)
	}
	if _, err := p.Render(nil, nil, body); err == nil {
		t.Fatal("a missing parameter rendered")
	}
	escape, err := Compile(Config{Probe: "GET /{{.body.url}}", Applied: "true", NotApplied: "false"})
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]string{"/evil.example/x": "GET /%2Fevil.example%2Fx", "A&reference=B#": "GET /A%26reference%3DB%23",
		"a b\nHost: x": "GET /a%20b%0AHost%3A%20x", "../../admin": "GET /..%2F..%2Fadmin", "%zz": "GET /%25zz"} {
		if got, err := escape.Render(nil, nil, map[string]any{"url": u}); err != nil || got != want {
			t.Errorf("%q rendered %q (%v), want %q: a value must not change the lookup", u, got, err, want)
		}
	}
	for answer, want := range map[string]ledger.Verdict{
		`{"items":[{"id":1}]}`: ledger.Applied, `{"items":[]}`: ledger.NotApplied, `{"other":1}`: ledger.Inconclusive,
		`not json`: ledger.Inconclusive,
	} {
		if v := p.Judge(200, http.Header{}, []byte(answer)); v != want {
			t.Errorf("%s: %s, want %s", answer, v, want)
		}
	}
	if v := p.Judge(503, http.Header{}, []byte(`{"items":[]}`)); v != ledger.Inconclusive {
		t.Errorf("a 503: %s", v)
	}
}

func TestBackoffAndPatience(t *testing.T) {
	p, _ := Compile(Config{Probe: "GET /x", Applied: "true", NotApplied: "false", Every: time.Second,
		GiveUpAfter: time.Hour})
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 32 * time.Second} {
		if got := p.Next(n); got != want {
			t.Errorf("after %d: %v, want %v", n, got, want)
		}
	}
	now := time.Now()
	if p.GaveUp(now.Add(-time.Minute), now) || !p.GaveUp(now.Add(-2*time.Hour), now) {
		t.Fatal("patience")
	}
	if !strings.HasPrefix(p.method, "GET") {
		t.Fatal(p.method)
	}
}
