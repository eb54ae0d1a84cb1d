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

// TestDrillCommandThroughTheGateway: `idemgate drill` against the gateway
// in front of the naive reference API (which on its own fails most
// checks): every applicable check passes, and the exit status is 0. The
// effects are counted at the API itself.
func TestDrillCommandThroughTheGateway(t *testing.T) {
	d := newDrill(t, setup{})
	scenario := filepath.Join(d.dir, "drill.yaml")
	if err := os.WriteFile(scenario, []byte(fmt.Sprintf(`target: %s
headers: {Authorization: "Bearer ${DRILL_TOKEN}"}
write:
  method: POST
  path: /v1/tickets
  body: '{"project":"OPS","title":"drill {{.run}} {{.n}}","priority":2}'
idempotency: {header: Idempotency-Key}
effects: {get: %s/v1/effects, count: 'body.tickets_created'}
business_key: /source_event_id
`, d.gw.URL, d.api.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "drill", "--scenario", scenario, "--json")
	cmd.Env = append(os.Environ(), "DRILL_TOKEN="+token)
	out, err := cmd.Output()
	var rep drillpkg.Report
	if jerr := json.Unmarshal(out, &rep); jerr != nil || err != nil {
		t.Fatalf("drill: %v %v\n%s", err, jerr, out)
	}
	for _, c := range rep.Checks {
		if c.Verdict != drillpkg.Passed {
			t.Errorf("%s: %s (%s)", c.Check, c.Verdict, c.Reason)
		}
	}
	if rep.Serious || rep.Passed != len(rep.Checks) {
		t.Fatalf("report %+v", rep)
	}
}
