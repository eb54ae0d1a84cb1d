package agent

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// ApprovalInfo is the human decision an operation waits for, as the
// gateway named it: in its 202 answer (contract.Accepted), or in its view
// of the operation (contract.ApprovalView) when the client asked.
type ApprovalInfo struct {
	ID     string                `json:"id"`
	Status ledger.ApprovalStatus `json:"status"`
	// Summary is what the human is asked to approve, e.g. "Deploy web
	// 1.4.2 to production"; empty if the gateway did not say.
	Summary string `json:"summary,omitempty"`
	// ExpiresAt is when a pending approval expires undecided (once
	// approved, when it must have been used).
	ExpiresAt time.Time `json:"expires_at"`
	// URL is the approval's resource on the gateway's control API; the 202
	// names it, a lookup does not.
	URL string `json:"url,omitempty"`
}

// Lapsed says the approval can no longer be decided or used at now, as the
// gateway reckons it (ledger.ApprovalRef.Lapsed): the next identical
// request opens a new one for the same operation. An expiry the gateway
// did not name is not taken as past.
func (a *ApprovalInfo) Lapsed(now time.Time) bool {
	if a == nil || (a.ExpiresAt.IsZero() && a.Status != ledger.ApprovalExpired) {
		return false
	}
	return (&ledger.ApprovalRef{ID: a.ID, Status: a.Status, ExpiresAt: a.ExpiresAt}).Lapsed(now)
}

// accepted reads a 202 answer: the approval it waits for, and the code
// (approval_required, or approval_expired when the earlier one lapsed).
// An answer that is not the gateway's Accepted body gives nil.
func accepted(body []byte) (*ApprovalInfo, string) {
	var acc contract.Accepted
	if json.Unmarshal(body, &acc) != nil || acc.Approval.ID == "" {
		return nil, ""
	}
	a := acc.Approval
	return &ApprovalInfo{ID: a.ID, Status: a.Status, Summary: a.Summary, ExpiresAt: a.ExpiresAt, URL: a.URL}, acc.Code
}

// approvalOf is the approval in the gateway's view of an operation.
func approvalOf(v *contract.ApprovalView) *ApprovalInfo {
	if v == nil {
		return nil
	}
	return &ApprovalInfo{ID: v.ID, Status: v.Status, Summary: v.Summary, ExpiresAt: v.ExpiresAt}
}

// what names what the human is asked to approve, in words.
func (a *ApprovalInfo) what() string {
	switch {
	case a == nil:
		return "this operation"
	case a.Summary != "":
		return fmt.Sprintf("%q (approval %s)", a.Summary, a.ID)
	}
	return "this operation (approval " + a.ID + ")"
}

// by says by when a human must decide, or "" if the gateway did not say.
func (a *ApprovalInfo) by() string {
	if a == nil || a.ExpiresAt.IsZero() {
		return ""
	}
	return " before " + a.ExpiresAt.UTC().Format(time.RFC3339)
}

// waiting says in words what an operation waiting for its approval asks.
func (a *ApprovalInfo) waiting() string {
	return "a human must approve " + a.what() + a.by() + "; nothing was sent to the API. Resuming this intent " +
		"(the same key) runs it once approved, and never twice"
}

// acceptedReason says what a 202 answer came to.
func acceptedReason(status int, code string, a *ApprovalInfo) string {
	s := fmt.Sprintf("answered %d", status)
	if code != "" {
		s += " " + code
	}
	if code == contract.CodeApprovalExpired {
		s += ": the earlier approval request expired undecided, and a new one was opened for the same operation;"
	} else {
		s += ":"
	}
	return s + " " + a.waiting()
}

// lapsedNote says what a lookup found of an operation whose approval
// lapsed undecided (or unused): it is sent again, which opens a new one.
func (a *ApprovalInfo) lapsedNote() string {
	s := "its approval " + a.ID
	if a.Summary != "" {
		s += fmt.Sprintf(" for %q", a.Summary)
	}
	s += " lapsed"
	if !a.ExpiresAt.IsZero() {
		s += " at " + a.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return s + " before it ran; sending it again (the same key) opens a new one for the same operation"
}
