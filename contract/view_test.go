package contract

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// TestApprovalViews: an operation's approval in a list shows what the
// operation knows of it; a whole approval shows every member of docs/design.md's
// record, decided or not.
func TestApprovalViews(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	op := &ledger.Operation{ID: "op_1", State: ledger.Prepared,
		Approval: &ledger.ApprovalRef{ID: "apr_1", Status: ledger.ApprovalPending, ExpiresAt: at}}
	b, err := json.Marshal(NewSummary(op).Approval)
	if err != nil || string(b) != `{"id":"apr_1","status":"pending","expires_at":"2026-12-03T10:00:00Z"}` {
		t.Fatalf("ref: %s %v", b, err)
	}
	a := &ledger.Approval{ID: "apr_1", OpID: "op_1", Command: []byte(`{"environment":"production"}`), Approvers: []string{"approver"},
		Status: ledger.ApprovalPending, CreatedAt: at, ExpiresAt: at}
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

func TestView(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	op := &ledger.Operation{ID: "op_1", State: ledger.Succeeded, CreatedAt: now, UpdatedAt: now, ExpiresAt: now,
		Response: &ledger.Response{Status: 201, Body: []byte("secret")}}
	v := NewView(op, []ledger.Event{{To: ledger.Executing, At: now, Actor: "gw"},
		{From: ledger.Executing, To: ledger.Succeeded, At: now, Actor: "gw"}})
	if v.Response.Status != 201 || v.LeaseUntil != nil || v.History[0].From != nil || *v.History[1].From != ledger.Executing {
		t.Errorf("view %+v", v)
	}
}

// TestViewJSON: the views' JSON, member by member, as the control API has
// always sent it (docs/design.md, "The web page"): clients decode these bytes.
func TestViewJSON(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	op := &ledger.Operation{ID: "op_1", Key: "k", Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Route: "POST /v1/deployments",
		Target: "POST /v1/deployments", Principal: "agent", State: ledger.Succeeded, Fingerprint: "sha256:ab",
		Attempts: 2, CreatedAt: at, UpdatedAt: at, LeaseUntil: at, ExpiresAt: at, ResultRef: "7",
		Response: &ledger.Response{Status: 201, Body: []byte("secret")},
		Approval: &ledger.ApprovalRef{ID: "apr_1", Status: ledger.ApprovalUsed, ExpiresAt: at}}
	a := &ledger.Approval{ID: "apr_1", OpID: "op_1", Key: "k", Tenant: "acme", Route: "POST /v1/deployments",
		Target: "POST /v1/deployments", Fingerprint: "sha256:ab", Summary: "Deploy",
		Command: []byte(`{"environment":"production"}`), RequestedBy: "agent", Approvers: []string{"approver"},
		Status: ledger.ApprovalUsed, CreatedAt: at, ExpiresAt: at, DecidedBy: "alice", DecidedAt: at, Note: "ok"}
	v := NewView(op, []ledger.Event{{To: ledger.Executing, At: at, Actor: "gw"},
		{From: ledger.Executing, To: ledger.Succeeded, At: at, Actor: "gw", Reason: "201"}}).WithApproval(a)
	for i, c := range []struct {
		v    any
		want string
	}{
		{v, `{"id":"op_1","key":"k","namespace":"clients","kind":"route","tenant":"acme","route":"POST /v1/deployments","target":"POST /v1/deployments","principal":"agent","state":"succeeded","fingerprint":"sha256:ab","attempts":2,"created_at":"2026-12-03T10:00:00Z","updated_at":"2026-12-03T10:00:00Z","lease_until":"2026-12-03T10:00:00Z","expires_at":"2026-12-03T10:00:00Z","response":{"status":201},"result_ref":"7","approval":{"id":"apr_1","operation_id":"op_1","key":"k","tenant":"acme","route":"POST /v1/deployments","target":"POST /v1/deployments","fingerprint":"sha256:ab","summary":"Deploy","command":{"environment":"production"},"headers":{},"reversible":false,"requested_by":"agent","approvers":["approver"],"status":"used","created_at":"2026-12-03T10:00:00Z","expires_at":"2026-12-03T10:00:00Z","decided_by":"alice","decided_at":"2026-12-03T10:00:00Z","note":"ok"},"history":[{"from":null,"to":"executing","at":"2026-12-03T10:00:00Z","actor":"gw","reason":""},{"from":"executing","to":"succeeded","at":"2026-12-03T10:00:00Z","actor":"gw","reason":"201"}],"effects":[]}`},
		{NewListView(ledger.Page{Operations: []*ledger.Operation{op}, Next: "c"}), `{"operations":[{"id":"op_1","key":"k","namespace":"clients","kind":"route","tenant":"acme","route":"POST /v1/deployments","target":"POST /v1/deployments","principal":"agent","state":"succeeded","fingerprint":"sha256:ab","attempts":2,"created_at":"2026-12-03T10:00:00Z","updated_at":"2026-12-03T10:00:00Z","lease_until":"2026-12-03T10:00:00Z","expires_at":"2026-12-03T10:00:00Z","response":{"status":201},"result_ref":"7","approval":{"id":"apr_1","status":"used","expires_at":"2026-12-03T10:00:00Z"}}],"next":"c"}`},
		{NewApprovalListView(ledger.ApprovalPage{Approvals: []*ledger.Approval{a}}), `{"approvals":[{"id":"apr_1","operation_id":"op_1","key":"k","tenant":"acme","route":"POST /v1/deployments","target":"POST /v1/deployments","fingerprint":"sha256:ab","summary":"Deploy","command":{"environment":"production"},"headers":{},"reversible":false,"requested_by":"agent","approvers":["approver"],"status":"used","created_at":"2026-12-03T10:00:00Z","expires_at":"2026-12-03T10:00:00Z","decided_by":"alice","decided_at":"2026-12-03T10:00:00Z","note":"ok"}],"next":null}`},
	} {
		if b, err := json.Marshal(c.v); err != nil || string(b) != c.want {
			t.Errorf("view %d: %s %v\nwant %s", i, b, err, c.want)
		}
	}
}
