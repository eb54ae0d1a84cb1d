package mcpserver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/agent"
)

// Every next step, for every kind and state, points only at fields that
// carry something, and says "nothing happened" only when nothing was sent.
func TestNextStepPromisesOnlyWhatTheResultCarries(t *testing.T) {
	kinds := []agent.Kind{"", agent.Created, agent.Replayed, agent.InProgress, agent.NeedsApproval, agent.Conflict,
		agent.Rejected, agent.Unauthorized, agent.Unknown, agent.Failed}
	for _, k := range kinds {
		for _, sent := range []agent.Sent{agent.SentNo, agent.SentMaybe, agent.SentYes} {
			for flags := range 16 {
				o := agent.Outcome{Kind: k, Sent: sent, Reason: "r", Unfinished: flags&1 != 0, Expired: flags&2 != 0}
				if flags&4 != 0 {
					o.Status = 503
				}
				if flags&8 != 0 {
					o.Body = []byte(`{}`)
				}
				next, name := NextStep(o), fmt.Sprintf("%+v", o)
				if next == "" {
					t.Fatalf("%s: no next step", name)
				}
				if _, see, ok := strings.Cut(next, "(see "); ok {
					see, _, _ = strings.Cut(see, ")")
					if strings.Contains(see, "status") != (o.Status > 0) || strings.Contains(see, "body") != (len(o.Body) > 0) {
						t.Errorf("%s: %q", name, next)
					}
				}
				if strings.Contains(next, "nothing happened") && sent != agent.SentNo {
					t.Errorf("%s: %q", name, next)
				}
			}
		}
	}
}
