package drill

import (
	"net/http"
	"strings"
	"testing"
)

const goodScenario = `target: http://127.0.0.1:8080
headers: {Authorization: "Bearer ${DRILL_TOKEN}"}
write:
  method: POST
  path: /v1/tickets
  body: '{"project":"OPS","title":"drill {{.run}} {{.n}}","priority":2}'
idempotency: {header: Idempotency-Key}
effects: {get: /v1/effects, count: 'body.tickets_created'}
status: /_idem/v1/operations?key={{.key}}
business_key: /source_event_id
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
}

// TestBadScenarios: each kind of mistake is an error naming its line.
func TestBadScenarios(t *testing.T) {
	t.Setenv("DRILL_TOKEN", "x")
	for name, c := range map[string]struct{ from, to, want string }{
		"unknown key":      {"idempotency:", "idempotence:", `drill.yaml:7: unknown key "idempotence"`},
		"unset variable":   {"${DRILL_TOKEN}", "${NOPE}", "drill.yaml:2: ${NOPE} is not set"},
		"bad target":       {"http://127.0.0.1:8080", "ftp://x", "drill.yaml:1: target"},
		"read as a write":  {"method: POST", "method: GET", "drill.yaml:3: write.method"},
		"no n in the body": {"{{.run}} {{.n}}", "{{.run}}", "drill.yaml:3: write.body: it renders the same"},
		"bad template":     {"{{.n}}", "{{.n", "drill.yaml:3: write.body"},
		"two idempotency":  {"{header: Idempotency-Key}", "{header: Idempotency-Key, none: true}", "drill.yaml:7: idempotency"},
		"bad count":        {"body.tickets_created'", "body.tickets_created +'", "drill.yaml:8: effects.count"},
		"count not number": {"body.tickets_created'", "\"x\"'", "drill.yaml:8: effects.count: must be a number"},
		"bad pointer":      {"/source_event_id", "source_event_id", "drill.yaml:10: business_key"},
		"bad header":       {"Authorization:", "\"Bad Name\":", "drill.yaml:2: header"},
		"a string as int":  {"business_key: /source_event_id", "write: 3", "drill.yaml:10:"},
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
