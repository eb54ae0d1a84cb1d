package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	drillpkg "github.com/idemgate/idemgate/drill"
	"github.com/idemgate/idemgate/inbox/webhook"
)

// hookSecrets are each scheme's secret in these drills.
var hookSecrets = map[string]string{webhook.Standard: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	webhook.Stripe: "whsec_drill_stripe", webhook.GitHub: "drill github secret"}

// TestDrillWF10AgainstASignedWebhookRoute: `idemgate drill`'s wf-10 ("the
// same webhook arrives several times") against a gateway whose POST
// /v1/tickets is a signed webhook route in front of the naive reference
// API, for each scheme: the drill signs its deliveries with the secret
// both read from HOOK_SECRET, re-signs each redelivery, and the API makes
// one ticket (counted at the API itself). With the gateway holding
// another secret, every delivery is refused and wf-10 fails, no ticket
// made: the verdict rests on the signatures.
func TestDrillWF10AgainstASignedWebhookRoute(t *testing.T) {
	t.Parallel()
	for _, scheme := range webhook.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			for _, right := range []bool{true, false} {
				rep := webhookDrill(t, scheme, right)
				c := rep.Checks[0]
				if len(rep.Checks) != 1 || c.ID != "wf-10" {
					t.Fatalf("report %+v", rep)
				}
				if right && (c.Verdict != drillpkg.Passed || rep.Serious || c.Effects != 1) {
					t.Fatalf("the right secret: %+v", c)
				}
				if !right && (c.Verdict != drillpkg.FailedCheck || c.Finding != drillpkg.FindingMissing || c.Effects != 0) {
					t.Fatalf("another secret: %+v", c)
				}
			}
		})
	}
}

// webhookDrill runs wf-10 against a new gateway's webhook route; the
// gateway's secret is the drill's if right, another otherwise.
func webhookDrill(t *testing.T, scheme string, right bool) drillpkg.Report {
	dir := t.TempDir()
	api := startProc(t, nil, "opsapi", "--listen", "127.0.0.1:0", "--db", filepath.Join(dir, "ops.db"), "--naive")
	config := filepath.Join(dir, "gateway.yaml")
	text := fmt.Sprintf(`listen: 127.0.0.1:0
store: sqlite:%s
upstreams:
  ops: {url: %s, timeout: 2s}
routes:
  - {match: POST /v1/tickets, upstream: ops, webhook: {scheme: %s, secret: "${HOOK_SECRET}", tenant: acme}}
`, filepath.Join(dir, "gateway.db"), api.URL, scheme)
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	gwSecret := hookSecrets[scheme]
	if !right {
		gwSecret = map[string]string{webhook.Standard: "whsec_c2Vjb25kIHNlY3JldCBvZiAyNCBieXRlcw=="}[scheme]
		if gwSecret == "" {
			gwSecret = "another " + scheme + " secret"
		}
	}
	gw := startProc(t, []string{"HOOK_SECRET=" + gwSecret}, "serve", "--config", config)
	scenario := filepath.Join(dir, "drill.yaml")
	text = fmt.Sprintf(`target: %s
write: {method: POST, path: /v1/tickets, body: '{"project":"OPS","title":"hook {{.run}} {{.n}}","priority":2}'}
effects: {get: %s/v1/effects, count: 'body.tickets_created'}
webhook: {scheme: %s, secret: "${HOOK_SECRET}"}
`, gw.URL, api.URL, scheme)
	if err := os.WriteFile(scenario, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "drill", "--scenario", scenario, "--only", "wf-10", "--json")
	cmd.Env = append(os.Environ(), "HOOK_SECRET="+hookSecrets[scheme])
	out, err := cmd.Output()
	var rep drillpkg.Report
	if jerr := json.Unmarshal(out, &rep); jerr != nil || (err != nil && right) {
		t.Fatalf("drill: %v %v\n%s", err, jerr, out)
	}
	return rep
}
