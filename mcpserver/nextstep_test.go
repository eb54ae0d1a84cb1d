package mcpserver

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/agent"
	"github.com/idemgate/idemgate/ledger"
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

// A write waiting for a human: by when, or, once the approval lapsed, that
// resuming opens a new one; never a new intent.
func TestApprovalStep(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pending := &agent.ApprovalInfo{ID: "apr_1", Status: ledger.ApprovalPending, Summary: "Deploy web",
		ExpiresAt: now.Add(15 * time.Minute)}
	lapsed := *pending
	lapsed.ExpiresAt = now.Add(-time.Minute)
	for name, c := range map[string]struct {
		a    *agent.ApprovalInfo
		want []string
	}{
		"pending": {pending, []string{`approve "Deploy web" before 2026-12-02T12:15:00Z`, "operation_status"}},
		"lapsed": {&lapsed, []string{`The approval request for "Deploy web" expired undecided at 2026-12-02T11:59:00Z`,
			"it opens a new approval request for the same action"}},
		"unnamed": {nil, []string{"approve this write (operation_status shows by when)"}},
	} {
		next := approvalStep(c.a, now)
		for _, want := range append(c.want, "Do not create a new intent") {
			if !strings.Contains(next, want) {
				t.Errorf("%s: %q lacks %q", name, next, want)
			}
		}
	}
}
