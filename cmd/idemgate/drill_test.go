package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/drill"
	"github.com/idemgate/idemgate/internal/opsapi"
)

// opsAPI serves the reference API, naive or idempotent, in this process.
// A rollout holds its environment for 2s: the window in which the
// concurrency check's two deployments must both arrive, wide under load.
func opsAPI(t *testing.T, naive bool) string {
	api, err := opsapi.New(context.Background(), opsapi.Options{Path: filepath.Join(t.TempDir(), "ops.db"), Naive: naive,
		DeployDuration: 2 * time.Second})
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

// drillScenarios are the reference API's two writes as scenarios: tickets
// (a business key) and deployments (a concurrency group).
var drillScenarios = map[string]string{
	"tickets": `target: %s
write:
  method: POST
  path: /v1/tickets
  body: '{"project":"OPS","title":"drill {{.run}} {{.n}}","priority":2}'
idempotency: {header: Idempotency-Key}
effects: {get: /v1/effects, count: 'body.tickets_created'}
business_key: /source_event_id
`,
	"deployments": `target: %s
write:
  method: POST
  path: /v1/deployments
  body: '{"service":"billing","environment":"staging","artifact":"sha256:{{printf "%%056d" .n}}{{.run}}"}'
idempotency: {header: Idempotency-Key}
effects: {get: /v1/effects, count: 'body.deployments_started'}
concurrency_key: /environment
`,
}

func scenarioFile(t *testing.T, write, target string) string {
	path := filepath.Join(t.TempDir(), "drill.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(drillScenarios[write], target)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// drillVerdicts is what the drill must say of the naive reference API, by
// check id: the duplicate effects where they happen; the checks a naive
// API survives (nothing delivered, a 429, a new key on purpose) pass.
var drillVerdicts = map[string]map[string]string{
	"tickets": {"wf-1": "failed duplicate_effect", "wf-2": "failed duplicate_effect", "wf-3": "passed",
		"wf-4": "failed duplicate_effect", "wf-5": "failed duplicate_effect", "wf-6": "failed duplicate_effect",
		"wf-7": "not_applicable", "wf-8": "failed duplicate_effect", "wf-9": "passed",
		"wf-10": "failed duplicate_effect", "wf-11": "not_applicable", "wf-12": "passed",
		"agent-3": "failed duplicate_effect", "status": "not_applicable", "concurrency": "not_applicable"},
	"deployments": {"wf-1": "failed duplicate_effect", "wf-2": "failed duplicate_effect", "wf-3": "passed",
		"wf-4": "failed duplicate_effect", "wf-5": "failed duplicate_effect", "wf-6": "failed duplicate_effect",
		"wf-7": "not_applicable", "wf-8": "failed duplicate_effect", "wf-9": "passed",
		"wf-10": "not_applicable", "wf-11": "not_applicable", "wf-12": "passed",
		"agent-3": "failed duplicate_effect", "status": "not_applicable", "concurrency": "failed group_overlap"},
}

// TestDrillGrades: against the naive reference API the drill finds exactly
// the failures above and exits 1; against the idempotent one every
// applicable check passes and it exits 0. The JUnit parses as JUnit XML
// with the report's counts. The four drills run at once: the naive
// verdicts of wf-8 and agent-3 no longer rest on timings (the drill holds
// their first attempt at its proxy until it releases it).
func TestDrillGrades(t *testing.T) {
	t.Parallel()
	for _, write := range []string{"tickets", "deployments"} {
		for _, naive := range []bool{true, false} {
			name := write + map[bool]string{true: "/naive", false: "/idempotent"}[naive]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				junit := filepath.Join(t.TempDir(), "drill.xml")
				r := run(t, "", "drill", "--scenario", scenarioFile(t, write, opsAPI(t, naive)), "--json", "--junit", junit)
				rep := drillReport(t, r)
				if wantCode := map[bool]int{true: 1, false: 0}[naive]; r.code != wantCode || rep.Serious != naive {
					t.Fatalf("exit %d (serious %t), want %d:\n%s", r.code, rep.Serious, wantCode, r.stdout)
				}
				got := verdicts(rep)
				for id, v := range drillVerdicts[write] {
					if !naive && strings.HasPrefix(v, "failed") {
						v = "passed"
					}
					if got[id] != v {
						t.Errorf("%s: %s, want %s", id, got[id], v)
					}
				}
				if len(got) != len(drillVerdicts[write]) {
					t.Errorf("checks %v, want %d", got, len(drillVerdicts[write]))
				}
				wantJUnit(t, junit, rep)
			})
		}
	}
}

// TestDrillRefusesAnUnboundedTemplate: a body template that would render
// a gigabyte exits 1 at once, naming the scenario's line, before any
// request, and without the memory it asked for.
func TestDrillRefusesAnUnboundedTemplate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "drill.yaml")
	scenario := strings.Replace(fmt.Sprintf(drillScenarios["tickets"], "http://127.0.0.1:1"), `"priority":2}`,
		`"priority":2,"x":"{{range 100000000}}xxxxxxxxxx{{end}}"}`, 1)
	if err := os.WriteFile(path, []byte(scenario), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "drill", "--scenario", path)
	// Whichever bound it meets first: the size, or on a loaded machine the
	// time (the drill package's tests hold each bound to its own).
	if r.code != 1 || !strings.Contains(r.stderr, "drill.yaml:5: write.body") ||
		!strings.Contains(r.stderr, "renders more than 1048576 bytes") && !strings.Contains(r.stderr, "longer than 1s to render") {
		t.Fatalf("an unbounded template: exit %d: %s", r.code, r.stderr)
	}
}

func drillReport(t *testing.T, r result) drill.Report {
	t.Helper()
	var rep drill.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("report: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	return rep
}

// verdicts maps each check's id to "verdict[ finding]".
func verdicts(rep drill.Report) map[string]string {
	out := map[string]string{}
	for _, c := range rep.Checks {
		out[c.ID] = strings.TrimSpace(string(c.Verdict) + " " + c.Finding)
	}
	return out
}

// wantJUnit parses the JUnit file with encoding/xml and compares its
// counts and case names with the report.
func wantJUnit(t *testing.T, path string, rep drill.Report) {
	t.Helper()
	var suite struct {
		XMLName  xml.Name `xml:"testsuite"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Skipped  int      `xml:"skipped,attr"`
		Cases    []struct {
			Name    string    `xml:"name,attr"`
			Failure *struct{} `xml:"failure"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	}
	b, err := os.ReadFile(path)
	if err != nil || xml.Unmarshal(b, &suite) != nil {
		t.Fatalf("junit %v:\n%s", err, b)
	}
	failed, skipped := 0, 0
	var names []string
	for _, c := range suite.Cases {
		names = append(names, c.Name)
		if c.Failure != nil {
			failed++
		}
		if c.Skipped != nil {
			skipped++
		}
	}
	if suite.Tests != len(rep.Checks) || suite.Failures != rep.Failed || suite.Skipped != rep.NA ||
		failed != rep.Failed || skipped != rep.NA || len(names) != len(rep.Checks) ||
		names[0] != rep.Checks[0].ID+": "+rep.Checks[0].Check {
		t.Fatalf("junit %+v, report passed %d failed %d n/a %d:\n%s", suite, rep.Passed, rep.Failed, rep.NA, b)
	}
}

// TestDrillBadScenario: a scenario that does not load is exit 1, its
// error naming the file and the line, and nothing is sent.
func TestDrillBadScenario(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	text := strings.Replace(fmt.Sprintf(drillScenarios["tickets"], "http://127.0.0.1:1"), "method: POST", "method: GET", 1)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "drill", "--scenario", path)
	if r.code != 1 || !strings.Contains(r.stderr, path+":3: write.method") || r.stdout != "" {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}
