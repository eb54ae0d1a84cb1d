package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgate/idemgate/drill"
	"github.com/idemgate/idemgate/examples/opsapi"
)

// opsAPI serves the reference API, naive or idempotent, in this process.
func opsAPI(t *testing.T, naive bool) string {
	api, err := opsapi.New(context.Background(), opsapi.Options{Path: filepath.Join(t.TempDir(), "ops.db"), Naive: naive})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Close() })
	h, err := api.Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func scenarioFile(t *testing.T, target string) string {
	path := filepath.Join(t.TempDir(), "drill.yaml")
	text := fmt.Sprintf(`target: %s
write:
  method: POST
  path: /v1/tickets
  body: '{"project":"OPS","title":"drill {{.run}} {{.n}}","priority":2}'
idempotency: {header: Idempotency-Key}
effects: {get: /v1/effects, count: 'body.tickets_created'}
business_key: /source_event_id
`, target)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDrillGrades: against the naive reference API the drill finds the
// duplicate effects where they happen and exits 1; against the idempotent
// one every check passes and it exits 0. The JSON is the documented
// report, and the JUnit parses as JUnit XML.
func TestDrillGrades(t *testing.T) {
	want := map[bool]map[string]drill.Verdict{
		true: {"same request twice": drill.FailedCheck, "concurrent copies, one key": drill.FailedCheck,
			"lost response, then a retry": drill.FailedCheck, "payload changed under one key": drill.FailedCheck,
			"429 and its Retry-After": drill.Passed, "retry after a long pause": drill.FailedCheck,
			"the same webhook several times (business key)": drill.FailedCheck,
			"a new, identical action on purpose (new key)":  drill.Passed},
		false: {},
	}
	for _, naive := range []bool{true, false} {
		t.Run(map[bool]string{true: "naive", false: "idempotent"}[naive], func(t *testing.T) {
			junit := filepath.Join(t.TempDir(), "drill.xml")
			r := run(t, "", "drill", "--scenario", scenarioFile(t, opsAPI(t, naive)), "--json", "--junit", junit)
			var rep drill.Report
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("report: %v\n%s\n%s", err, r.stdout, r.stderr)
			}
			if wantCode := map[bool]int{true: 1, false: 0}[naive]; r.code != wantCode || rep.Serious != naive {
				t.Fatalf("exit %d (serious %t), want %d:\n%s", r.code, rep.Serious, wantCode, r.stdout)
			}
			for _, c := range rep.Checks {
				v, ok := want[naive][c.Check]
				if !ok {
					v = drill.Passed
				}
				if c.Verdict != v {
					t.Errorf("%s: %s (%s), want %s", c.Check, c.Verdict, c.Reason, v)
				}
			}
			var suite struct {
				Tests    int `xml:"tests,attr"`
				Failures int `xml:"failures,attr"`
			}
			b, err := os.ReadFile(junit)
			if err != nil || xml.Unmarshal(b, &suite) != nil || suite.Tests != len(rep.Checks) || suite.Failures != rep.Failed {
				t.Fatalf("junit %+v %v:\n%s", suite, err, b)
			}
		})
	}
}
