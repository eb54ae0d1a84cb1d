package ledger

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestApprovalViews: an operation's approval in a list shows what the
// operation knows of it; a whole approval shows every member of DESIGN.md's
// record, decided or not.
func TestApprovalViews(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	op := &Operation{ID: "op_1", State: Prepared, Approval: &ApprovalRef{ID: "apr_1", Status: ApprovalPending, ExpiresAt: at}}
	b, err := json.Marshal(NewSummary(op).Approval)
	if err != nil || string(b) != `{"id":"apr_1","status":"pending","expires_at":"2026-12-03T10:00:00Z"}` {
		t.Fatalf("ref: %s %v", b, err)
	}
	a := &Approval{ID: "apr_1", OpID: "op_1", Command: []byte(`{"environment":"production"}`), Approvers: []string{"approver"},
		Status: ApprovalPending, CreatedAt: at, ExpiresAt: at}
	b, err = json.Marshal(NewView(op, nil).WithApproval(a).Approval)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "operation_id", "key", "tenant", "route", "target", "fingerprint", "summary", "command",
		"reversible", "requested_by", "status", "created_at", "expires_at", "decided_by", "decided_at", "note"} {
		if _, ok := got[k]; !ok {
			t.Errorf("whole approval lacks %q: %s", k, b)
		}
	}
	if got["decided_at"] != nil || !strings.Contains(string(b), `"command":{"environment":"production"}`) ||
		!slices.Equal(got["approvers"].([]any), []any{"approver"}) {
		t.Fatalf("whole approval %s", b)
	}
}
