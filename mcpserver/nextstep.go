package mcpserver

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/agent"
)

// NextStep says, in words a model follows, what to do after an outcome. It
// is true for the case at hand (nothing sent, turned away for now, final),
// and points only at result fields that carry something.
func NextStep(o agent.Outcome) string {
	see := seeFields(o)
	switch o.Kind {
	case agent.Created, agent.Replayed:
		return `Done: the action happened exactly once. Do not send it again; to do it once more on purpose, use mode "repeat".`
	case agent.InProgress:
		return "Still running. Call operation_status with this intent later (or submit_write again with the same intent: it will not run twice)."
	case agent.NeedsApproval:
		return approvalStep(o.Approval, time.Now())
	case agent.Conflict:
		return `This intent's key was first used with a different request ` + see + `. If the parameters changed on purpose, use mode "revise".`
	case agent.Rejected:
		return `Refused: the request is invalid or the API declined it ` + see + `. Fix the parameters and use mode "revise"; resending it unchanged fails the same way.`
	case agent.Unauthorized:
		return "Not allowed with this server's credentials " + see + ". Do not retry; tell the user."
	case agent.Unknown:
		return unknownStep(o, see)
	case agent.Failed:
		return failedStep(o, see)
	}
	if o.Sent == agent.SentMaybe {
		return "A request of this intent may have left with no answer recorded (the process stopped). Call " +
			"submit_write again with this intent and the same method, path and body (mode resume): it asks the " +
			"gateway first, and never performs it twice."
	}
	return "Not sent yet: call submit_write with this intent and the same method, path and body to perform it."
}

// approvalStep is the next step of a write waiting for a human's decision:
// who decides, by when, and that the same intent, unchanged, is the way on.
func approvalStep(a *agent.ApprovalInfo, now time.Time) string {
	const keep = " Do not create a new intent and do not change the method, path or body: that would need a new " +
		"approval, and the action could then happen twice."
	what := "this write"
	if a != nil && a.Summary != "" {
		what = fmt.Sprintf("%q", a.Summary)
	}
	if a != nil && a.Lapsed(now) {
		return "The approval request for " + what + " expired undecided" + at(" at ", a) + ", and nothing was sent " +
			"to the API. Call submit_write again with the same intent, method, path and body (mode resume): it opens " +
			"a new approval request for the same action." + keep
	}
	by := at(" before ", a)
	if by == "" {
		by = " (operation_status shows by when)"
	}
	return "A human must decide whether to approve " + what + by + "; nothing is sent to the API until then. " +
		"Tell the user it waits for a human's approval. Call operation_status with this intent later, or " +
		"submit_write again with the same intent, method, path and body (mode resume): it runs the write once " +
		"approved, and never twice." + keep
}

// at is the approval's expiry after prefix, or "" if it has none.
func at(prefix string, a *agent.ApprovalInfo) string {
	if a == nil || a.ExpiresAt.IsZero() {
		return ""
	}
	return prefix + a.ExpiresAt.UTC().Format(time.RFC3339)
}

func unknownStep(o agent.Outcome, see string) string {
	switch {
	case o.Expired:
		return "Unknown, and the gateway no longer holds it " + see + ", so asking again will not tell more. Do " +
			"not send it again. Ask a human to check the API by hand; only if the action is still needed, do it " +
			"under a new intent."
	case o.Unfinished:
		return "Unknown: it may have taken effect, and the gateway could not be asked " + see + ". Do not retry " +
			"and do not create a new intent; call operation_status later."
	}
	return "Unknown: the request reached the gateway and nobody knows whether it took effect " + see + ". Do not " +
		"retry and do not create a new intent; call operation_status later, or ask a human to reconcile it."
}

func failedStep(o agent.Outcome, see string) string {
	const resume = "Call submit_write again later with the same intent, method, path and body (mode resume): " +
		"it is never performed twice."
	switch {
	case !o.Unfinished:
		return "Failed " + see + ", and resuming this intent will not change that. Tell the user; to try once " +
			`more on purpose, use mode "repeat", or "revise" to change the parameters.`
	case o.Sent == agent.SentNo:
		return "Nothing reached the gateway " + see + ", so nothing happened. " + resume +
			" If it keeps failing, tell the user the gateway is unreachable."
	}
	return "Not applied for now " + see + ". " + resume
}

// seeFields points at the result fields that carry something: reason
// always, status and body when there are any.
func seeFields(o agent.Outcome) string {
	fields := []string{"reason"}
	if o.Status > 0 {
		fields = append(fields, "status")
	}
	if len(o.Body) > 0 {
		fields = append(fields, "body")
	}
	if len(fields) == 1 {
		return "(see reason)"
	}
	return "(see " + strings.Join(fields[:len(fields)-1], ", ") + " and " + fields[len(fields)-1] + ")"
}
