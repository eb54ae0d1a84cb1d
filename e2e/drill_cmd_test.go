package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	drillpkg "github.com/idemgate/idemgate/drill"
)

// gatewayScenarios are the reference API's two writes through the
// gateway, the operation's status read from the control API by key.
var gatewayScenarios = map[string]string{
	"tickets": `body: '{"project":"OPS","title":"drill {{.run}} {{.n}}","priority":2}'
  path: /v1/tickets
effects: {get: %s/v1/effects, count: 'body.tickets_created'}
business_key: /source_event_id
`,
	"deployments": `body: '{"service":"billing","environment":"staging","artifact":"sha256:{{printf "%%056d" .n}}{{.run}}"}'
  path: /v1/deployments
effects: {get: %s/v1/effects, count: 'body.deployments_started'}
concurrency_key: /environment
`,
}

// TestDrillCommandThroughTheGateway: `idemgate drill` against the gateway
// in front of the naive reference API (which on its own fails most
// checks): every applicable check passes, the status of a disputed write
// included, and the exit status is 0. The effects are counted at the API
// itself. A deployment takes the API a second, as real ones take time,
// so that two sent at once overlap at the gateway.
func TestDrillCommandThroughTheGateway(t *testing.T) {
	t.Parallel()
	for _, write := range []string{"tickets", "deployments"} {
		t.Run(write, func(t *testing.T) {
			t.Parallel()
			d := newDrill(t, setup{})
			if write == "deployments" {
				d.fault(`{"delay_ms":1000}`) // a live deployment holds its group a second at the gateway
			}
			scenario := filepath.Join(d.dir, "drill.yaml")
			text := fmt.Sprintf("target: %s\nheaders: {Authorization: \"Bearer ${DRILL_TOKEN}\"}\n"+
				"idempotency: {header: Idempotency-Key}\nstatus: {get: '/_idem/v1/operations?key={{.key}}'}\n"+
				"write:\n  method: POST\n  "+gatewayScenarios[write], d.gw.URL, d.api.URL)
			if err := os.WriteFile(scenario, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(binary, "drill", "--scenario", scenario, "--json")
			cmd.Env = append(os.Environ(), "DRILL_TOKEN="+token)
			out, err := cmd.Output()
			var rep drillpkg.Report
			if jerr := json.Unmarshal(out, &rep); jerr != nil || err != nil {
				t.Fatalf("drill: %v %v\n%s", err, jerr, out)
			}
			na := map[string]bool{"wf-7": true, "wf-11": true, map[string]string{"tickets": "concurrency",
				"deployments": "wf-10"}[write]: true}
			for _, c := range rep.Checks {
				if want := map[bool]drillpkg.Verdict{true: drillpkg.NotApplicable, false: drillpkg.Passed}[na[c.ID]]; c.Verdict != want {
					t.Errorf("%s %s: %s (%s), want %s", c.ID, c.Check, c.Verdict, c.Reason, want)
				}
			}
			if rep.Serious || rep.Passed != len(rep.Checks)-3 {
				t.Fatalf("report %+v", rep)
			}
		})
	}
}
