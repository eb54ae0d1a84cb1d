package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/scenarios"
)

// The drills that tell the demo's stories play them from package
// scenarios, against the real processes, and assert more around them.

// scenarioEnv is the shared scenarios' environment for this drill: its
// gateway and ops API, the agent, the operator and alice as approver,
// and the built idemgate as the CLI. The narration goes to out.
func (d *drill) scenarioEnv(out *bytes.Buffer) *scenarios.Env {
	return &scenarios.Env{GatewayURL: d.gw.URL, APIURL: d.api.URL, AgentToken: token, OperatorToken: operatorToken,
		ApproverToken: approvers["alice"], StoreDSN: d.storeDSN(), Tenant: "acme", Dir: d.dir,
		AuditKey: d.auditKey() + ".pub", Checkpoints: d.checkpointsFile(), CLI: runCLI, Out: out}
}

// storeDSN is the gateway's store, as the CLI opens it.
func (d *drill) storeDSN() string {
	return cmp.Or(d.setup.storeDSN, "sqlite:"+d.storeDB+d.setup.storeQuery)
}

// runCLI runs the built idemgate and returns what it printed.
func runCLI(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("idemgate %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// play plays acts in a new play of its own and fails the drill if one
// performed the wrong number of effects, or failed; it returns the play's
// state and its narration.
func (d *drill) play(acts ...scenarios.Act) (*scenarios.State, string) {
	d.t.Helper()
	var out bytes.Buffer
	s := scenarios.NewState(strings.ReplaceAll(d.t.Name(), "/", "-"))
	for _, o := range d.scenarioEnv(&out).Play(context.Background(), s, acts) {
		if o.Err != nil {
			d.t.Fatalf("%s: %v\n%s", o.Act.Action, o.Err, out.String())
		}
	}
	return s, out.String()
}

// TestDrillAuditTrailOfADisputedCapture: the demo's last two acts against
// the real processes: a capture whose answer was lost, resolved by an
// operator with the CLI; then the tenant's audit log exported, verified
// offline, and the capture traced: forwarded once, by the agent's run.
func TestDrillAuditTrailOfADisputedCapture(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{audit: true})
	s, story := d.play(scenarios.ActPaymentUnknown, scenarios.ActAuditTrail)
	for _, want := range []string{"Forwarded upstream: 1 (by run " + s.AgentRun + ")", " resolved ",
		"Final state: succeeded."} {
		if !strings.Contains(story, want) {
			t.Errorf("the trace lacks %q:\n%s", want, story)
		}
	}
	d.wantEffects("captures", 1)
}
