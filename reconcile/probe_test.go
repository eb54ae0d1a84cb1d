package reconcile

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/fingerprint"
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
		"a b\nHost: x": "GET /a%20b%0AHost%3A%20x", "..x/y..": "GET /..x%2Fy..", "%zz": "GET /%25zz"} {
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

// refundProbe is the adversarial tester's route (issue 24, 7.1): a value
// of the write in the path, another in the query.
func refundProbe(t *testing.T) *Probe {
	t.Helper()
	p, err := Compile(Config{Probe: "GET /v1/refunds/{{.body.ref}}/status?order={{.body.order}}",
		Applied: "status == 200", NotApplied: "status == 404"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func doc(t *testing.T, text string) any {
	t.Helper()
	v, err := fingerprint.Parse([]byte(text), fingerprint.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRenderTakesOnlyScalars: a value that is an object, a list or null
// is no record's name; none is rendered, and the error names the place
// in the template, never the value (it may be a secret of the body).
func TestRenderTakesOnlyScalars(t *testing.T) {
	p := refundProbe(t)
	for _, body := range []string{
		`{"ref":{"/../../../internal/payroll?x=":1},"order":"o1"}`, // a map key with dot segments and a query
		`{"ref":{"R-1/status?order=VICTIM&x=":1},"order":"o1"}`,    // a map key that injects a query
		`{"ref":["R-1"],"order":"o1"}`, `{"ref":null,"order":"o1"}`, `{"ref":1.5,"order":"o1"}`,
		`{"ref":"R-1","order":{"a":"b"}}`,
	} {
		got, err := p.Render(nil, nil, doc(t, body))
		if err == nil {
			t.Errorf("%s rendered %q", body, got)
			continue
		}
		if !strings.Contains(err.Error(), ".body.") || strings.Contains(err.Error(), "payroll") ||
			strings.Contains(err.Error(), "VICTIM") {
			t.Errorf("%s: the error %q must name the place and not show the value", body, err)
		}
	}
	for body, want := range map[string]string{
		`{"ref":"R-1","order":"o1"}`:  "GET /v1/refunds/R-1/status?order=o1",
		`{"ref":42,"order":true}`:     "GET /v1/refunds/42/status?order=true",
		`{"ref":1e2,"order":-7}`:      "GET /v1/refunds/100/status?order=-7",
		`{"ref":"r é","order":"a+b"}`: "GET /v1/refunds/r%20%C3%A9/status?order=a%2Bb",
	} {
		if got, err := p.Render(nil, nil, doc(t, body)); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", body, got, err, want)
		}
	}
}

// TestRenderRefusesDotSegments: ".." as a value climbs out of the
// template's path; ".", "" and a value holding a dot segment between
// slashes (which an upstream that decodes %2F would climb with) too.
func TestRenderRefusesDotSegments(t *testing.T) {
	p := refundProbe(t)
	for _, ref := range []string{"..", ".", "", "../../admin", "a/../b", `..\x`, "x/."} {
		if got, err := p.Render(nil, nil, map[string]any{"ref": ref, "order": "o1"}); err == nil {
			t.Errorf("ref %q rendered %q", ref, got)
		}
	}
	for _, order := range []string{"..", ".", ""} {
		if got, err := p.Render(nil, nil, map[string]any{"ref": "R-1", "order": order}); err == nil {
			t.Errorf("order %q rendered %q", order, got)
		}
	}
	if got, err := p.Render(nil, nil, map[string]any{"ref": "a..b", "order": "../x"}); err != nil ||
		got != "GET /v1/refunds/a..b/status?order=..%2Fx" {
		t.Errorf("dots inside a value: %q %v", got, err)
	}
}

// TestRenderEscapesByPlace: a value never adds a segment, a query
// parameter or a fragment, wherever it stands.
func TestRenderEscapesByPlace(t *testing.T) {
	p := refundProbe(t)
	got, err := p.Render(nil, nil, map[string]any{"ref": "R-1/status?order=VICTIM&x=", "order": "o1&order=VICTIM#f"})
	if err != nil {
		t.Fatal(err)
	}
	_, target, _ := strings.Cut(got, " ")
	u, err := url.ParseRequestURI(target)
	if err != nil {
		t.Fatal(err)
	}
	if u.EscapedPath() != "/v1/refunds/R-1%2Fstatus%3Forder%3DVICTIM%26x%3D/status" ||
		len(u.Query()) != 1 || u.Query().Get("order") != "o1&order=VICTIM#f" || u.Fragment != "" {
		t.Fatalf("a value changed the lookup: %q", got)
	}
	q, err := Compile(Config{Probe: "GET /v1/refunds?ref={{index .query.ref 0}}&id={{.params.id}}",
		Applied: "true", NotApplied: "false"})
	if err != nil {
		t.Fatal(err)
	}
	got, err = q.Render(map[string]string{"id": "7"}, map[string][]string{"ref": {"a&b=c"}}, nil)
	if err != nil || got != "GET /v1/refunds?ref=a%26b%3Dc&id=7" {
		t.Fatalf("query values: %q %v", got, err)
	}
	if got, err := q.Render(map[string]string{"id": "7"}, map[string][]string{"ref": {"a", "b"}}, nil); err != nil ||
		got != "GET /v1/refunds?ref=a&id=7" {
		t.Fatalf("the first of a query's values: %q %v", got, err)
	}
}

// TestProbeStaysUnderItsPrefix: what the reconciler sends is checked
// again when it is sent (a probe stored by an older version, or by hand,
// is not trusted): it stays a path on the upstream, under the template's
// literal prefix, with no dot segment.
func TestProbeStaysUnderItsPrefix(t *testing.T) {
	p := refundProbe(t)
	for _, target := range []string{"/v1/refunds/R-1/status?order=o1", "/v1/refunds/x"} {
		if err := p.Check(target); err != nil {
			t.Errorf("%s: %v", target, err)
		}
	}
	for _, target := range []string{"/internal/payroll", "/v1/refunds/map[/../../../internal/payroll?x=:1]/status?order=o1",
		"/v1/refunds/../../internal", "/v1/refunds/%2e%2e/x", "//evil.example/v1/refunds/x", "http://evil.example/v1/refunds/x",
		"/v1/refundsX", "/v1/refunds/x#frag", "/v1/refunds/a b"} {
		if err := p.Check(target); err == nil {
			t.Errorf("%s passed", target)
		}
	}
}

// TestCompileRefusesWhatCannotBeChecked: a probe whose values' places
// cannot be known from its text (a branch, a loop, a sub-template), or
// whose literal path climbs or names a fragment, is refused at start-up.
func TestCompileRefusesWhatCannotBeChecked(t *testing.T) {
	for _, probe := range []string{"GET /v1/x/{{if .body.a}}{{.body.a}}{{end}}", "GET /v1/{{range .body.a}}x{{end}}",
		"GET /v1/{{with .body.a}}{{.}}{{end}}", `GET /v1/{{define "x"}}y{{end}}`, "GET /v1/../admin/{{.body.a}}",
		"GET /v1/x/{{.body.a}}#top", "GET /v1/{{$x := .body.a}}"} {
		if _, err := Compile(Config{Probe: probe, Applied: "true", NotApplied: "false"}); err == nil {
			t.Errorf("%s compiled", probe)
		}
	}
}
