package drill

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// goodScenario has every setting on its own line, so that each mistake's
// line is its own.
const goodScenario = `target: http://127.0.0.1:8080
headers:
  Authorization: "Bearer ${DRILL_TOKEN}"
write:
  method: POST
  path: /v1/tickets
  body: '{"project":"OPS","title":"drill {{.run}} {{.n}}","priority":2}'
idempotency:
  header: Idempotency-Key
effects:
  get: /v1/effects
  count: 'body.tickets_created'
status:
  get: /_idem/v1/operations?key={{.key}}
  state: body.state
business_key: /source_event_id
concurrency_key: /meta/environment
`

func TestScenario(t *testing.T) {
	t.Setenv("DRILL_TOKEN", "s3cret")
	s, err := ParseScenario("drill.yaml", []byte(goodScenario))
	if err != nil {
		t.Fatal(err)
	}
	if s.Headers["Authorization"] != "Bearer s3cret" {
		t.Fatalf("headers %v", s.Headers)
	}
	b, err := s.Body(7, "r1")
	if err != nil || string(b) != `{"project":"OPS","title":"drill r1 7","priority":2}` {
		t.Fatalf("body %s %v", b, err)
	}
	n, err := s.Count(200, http.Header{}, []byte(`{"tickets_created":3}`))
	if err != nil || n != 3 {
		t.Fatalf("count %d %v", n, err)
	}
	if _, err := s.Count(200, http.Header{}, []byte(`{"tickets_created":1.5}`)); err == nil {
		t.Fatal("a fraction of an effect")
	}
	if u, err := s.StatusURL("a b&c"); err != nil || u != "/_idem/v1/operations?key=a+b%26c" {
		t.Fatalf("status url %q %v", u, err)
	}
	if st, err := s.State(200, http.Header{}, []byte(`{"state":"unknown"}`)); err != nil || st != "unknown" {
		t.Fatalf("state %q %v", st, err)
	}
	if _, err := s.State(200, http.Header{}, []byte(`{"state":3}`)); err == nil {
		t.Fatal("a state that is not a string")
	}
	if got := setPointer([]byte(`{"a":1}`), "/meta/environment", "g"); string(got) != `{"a":1,"meta":{"environment":"g"}}` {
		t.Fatalf("set pointer: %s", got)
	}
}

// TestBadScenarios: each kind of mistake is an error naming the file and
// the line where it is written.
func TestBadScenarios(t *testing.T) {
	t.Setenv("DRILL_TOKEN", "x")
	for name, c := range map[string]struct{ from, to, want string }{
		"not yaml":             {"write:\n", "write: [\n", "drill.yaml:"},
		"unknown key":          {"idempotency:", "idempotence:", `drill.yaml:8: unknown key "idempotence"`},
		"unknown nested key":   {"  count:", "  cuont:", `drill.yaml:12: unknown key "cuont"`},
		"unset variable":       {"${DRILL_TOKEN}", "${NOPE}", "drill.yaml:3: ${NOPE} is not set"},
		"bad target":           {"http://127.0.0.1:8080", "ftp://x", "drill.yaml:1: target"},
		"bad header":           {"  Authorization:", `  "Bad Name":`, `drill.yaml:3: header "Bad Name"`},
		"read as a write":      {"method: POST", "method: GET", "drill.yaml:5: write.method"},
		"path not a path":      {"path: /v1/tickets", "path: v1/tickets", "drill.yaml:6: write.path"},
		"bad template":         {"{{.n}}", "{{.n", "drill.yaml:7: write.body"},
		"no n in the body":     {"{{.run}} {{.n}}", "{{.run}}", "drill.yaml:7: write.body: it renders the same"},
		"body not json":        {`"priority":2}`, `"priority":2`, "drill.yaml:7: write.body: it does not render JSON"},
		"two idempotency":      {"  header: Idempotency-Key", "  header: Idempotency-Key\n  none: true", "drill.yaml:8: idempotency"},
		"bad key header":       {"header: Idempotency-Key", "header: Idempotency Key", "drill.yaml:9: idempotency.header"},
		"bad key pointer":      {"  header: Idempotency-Key", "  body: key", "drill.yaml:9: idempotency.body"},
		"bad effects get":      {"get: /v1/effects", "get: v1/effects", "drill.yaml:11: effects.get"},
		"no count":             {"  count: 'body.tickets_created'\n", "", "drill.yaml:10: effects.count"},
		"bad count":            {"body.tickets_created'", "body.tickets_created +'", "drill.yaml:12: effects.count"},
		"count not number":     {"body.tickets_created'", "\"x\"'", "drill.yaml:12: effects.count: must be a"},
		"status without key":   {"?key={{.key}}", "?key=1", "drill.yaml:14: status.get"},
		"status not a path":    {"get: /_idem", "get: _idem", "drill.yaml:14: status.get"},
		"bad status state":     {"state: body.state", "state: body.state +", "drill.yaml:15: status.state"},
		"state not a string":   {"state: body.state", "state: 1 + 2", "drill.yaml:15: status.state: must be a"},
		"bad business key":     {"/source_event_id", "source_event_id", "drill.yaml:16: business_key"},
		"bad concurrency key":  {"/meta/environment", "meta", "drill.yaml:17: concurrency_key"},
		"a list for a string":  {"business_key: /source_event_id", "business_key: [a]", "drill.yaml:16:"},
		"a mapping for a list": {"target: http://127.0.0.1:8080", "target: {a: b}", "drill.yaml:1:"},
	} {
		text := strings.Replace(goodScenario, c.from, c.to, 1)
		if text == goodScenario {
			t.Fatalf("%s: the edit did not apply", name)
		}
		if _, err := ParseScenario("drill.yaml", []byte(text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// FuzzParseScenario: no scenario file makes the parser panic, and one it
// accepts can render its bodies and status URLs.
func FuzzParseScenario(f *testing.F) {
	f.Add([]byte(goodScenario))
	f.Add([]byte("target: http://x\nwrite: {method: POST, path: /, body: '{\"n\":{{.n}}}'}\nidempotency: {none: true}\n" +
		"effects: {get: /e, count: size(body)}\n"))
	f.Add([]byte("a: [&x b, *x]\n"))
	f.Setenv("DRILL_TOKEN", "x")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScenario("fuzz.yaml", data)
		if err != nil {
			return
		}
		if _, err := s.Body(1, "r"); err != nil {
			t.Fatalf("accepted, but the body does not render: %v", err)
		}
		if s.Status.Get != "" {
			if _, err := s.StatusURL("k"); err != nil {
				t.Fatalf("accepted, but the status does not render: %v", err)
			}
		}
	})
}

// TestTemplatesAreBounded: a body template that would render without
// bound (a range of a hundred million), or loop for long without
// writing, is refused at once, naming the line; no memory is spent on
// it. The time bound is 20 ms for the silent loop, which is two million
// turns: 130 ms here without -race (65 ns a turn), over 1 s with it. The
// abandoned loop cannot be stopped: with the real bound (1 s), the loop
// had to be two hundred million turns, which then burned a core for the
// rest of the test process. Not in parallel: it sets the bound.
func TestTemplatesAreBounded(t *testing.T) {
	t.Setenv("DRILL_TOKEN", "x")
	was := renderTimeout
	t.Cleanup(func() { renderTimeout = was })
	for name, c := range map[string]struct {
		body, want string
		bound      time.Duration
	}{
		// 4 KiB a step: past the size bound in 257 steps, long before the
		// time bound on any machine (10 bytes a step took 100,000 steps,
		// and a loaded machine met the time bound first).
		"output": {`{"n":{{.n}},"x":"{{range 100000000}}{{printf "%04096d" 0}}{{end}}"}`, "renders more than 1048576 bytes", time.Second},
		"time":   {`{"n":{{.n}}{{range 2000000}}{{end}}}`, "takes longer than 20ms to render", 20 * time.Millisecond},
	} {
		renderTimeout = c.bound
		text := strings.Replace(goodScenario, `'{"project":"OPS","title":"drill {{.run}} {{.n}}","priority":2}'`,
			"'"+c.body+"'", 1)
		_, err := ParseScenario("drill.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), "drill.yaml:7: write.body") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want the line and %q", name, err, c.want)
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	if m.HeapAlloc > 256<<20 {
		t.Errorf("%d MiB of heap after refusing them", m.HeapAlloc>>20)
	}
}

// TestRunVoidWhenABodyCannotRender: a body that renders for the first
// actions but not past the bounds for a later one voids the run, naming
// the line, rather than sending an empty body.
func TestRunVoidWhenABodyCannotRender(t *testing.T) {
	t.Setenv("DRILL_TOKEN", "x")
	text := strings.Replace(goodScenario, `"priority":2}'`,
		`"priority":2{{if gt .n 3}}{{range 100000000}}xxxxxxxxxx{{end}}{{end}}}'`, 1)
	s, err := ParseScenario("drill.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Scenario: s, run: "r"}
	for range 4 {
		r.next()
	}
	if r.unrendered == nil || !strings.Contains(r.unrendered.Error(), "drill.yaml:7: write.body, for action 4") {
		t.Fatalf("the fourth body: %v", r.unrendered)
	}
}

// TestScenarioHeadersAreBounded (issue 34, item 23): a scenario sends at
// most MaxHeaders headers; more is refused at the headers' line, and a
// mapping of 100,000 (which the YAML decoder's duplicate check, one key
// against every other, took over a minute to read) is refused after one
// pass over it.
func TestScenarioHeadersAreBounded(t *testing.T) {
	t.Setenv("DRILL_TOKEN", "t")
	with := func(n int) []byte {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "  X-Drill-%d: v\n", i)
		}
		return []byte(strings.Replace(goodScenario, "headers:\n", "headers:\n"+b.String(), 1))
	}
	if _, err := ParseScenario("drill.yaml", with(MaxHeaders-1)); err != nil {
		t.Fatalf("%d headers: %v", MaxHeaders, err) // Authorization, and MaxHeaders-1 more
	}
	for _, n := range []int{MaxHeaders, 100_000} {
		_, err := ParseScenario("drill.yaml", with(n))
		if err == nil || !strings.Contains(err.Error(), "drill.yaml:2: ") || !strings.Contains(err.Error(), "at most") {
			t.Errorf("%d headers: %v, want a refusal at line 2 naming the bound", n+1, err)
		}
	}
}
