package mcpserver_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/mcpserver"
)

// approvalGateway answers every write with the gateway's 202 (a human must
// approve it) and every lookup with the operation's view, prepared, with
// its approval whole.
func approvalGateway(t *testing.T, exp time.Time, sends *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer server-side-token" {
			w.WriteHeader(401)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/_idem/v1/operations" {
			created := exp.Add(-15 * time.Minute)
			json.NewEncoder(w).Encode(contract.View{Summary: contract.Summary{ID: "op_5", Key: r.URL.Query().Get("key"),
				State: ledger.Prepared, Approval: &contract.ApprovalView{ID: "apr_5", OperationID: "op_5",
					Status: ledger.ApprovalPending, Summary: "Deploy web 1.4.2 to production", CreatedAt: &created,
					ExpiresAt: exp, Target: "POST /v1/services/web/deployments"}}, History: []contract.HistoryEntry{}})
			return
		}
		sends.Add(1)
		w.Header().Set("Idempotency-Operation", "op_5")
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(contract.Accepted{Code: "approval_required", Detail: "a human must approve it",
			OperationID: "op_5", State: ledger.Prepared, Approval: contract.AcceptedApproval{ID: "apr_5",
				Status: ledger.ApprovalPending, ExpiresAt: exp, Summary: "Deploy web 1.4.2 to production",
				URL: "/_idem/v1/approvals/apr_5"}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A write waiting for a human says who must decide what, by when, and to
// keep the same intent unchanged; operation_status shows the approval.
func TestNeedsApprovalNamesTheDeadline(t *testing.T) {
	exp := time.Now().Add(15 * time.Minute).UTC().Truncate(time.Second)
	deadline := exp.Format(time.RFC3339)
	var sends atomic.Int32
	cs := connect(t, approvalGateway(t, exp, &sends).URL)
	want := mcpserver.ApprovalResult{ID: "apr_5", Status: "pending", Summary: "Deploy web 1.4.2 to production",
		ExpiresAt: deadline}
	check := func(name string, r mcpserver.Result) {
		t.Helper()
		if r.Kind != "needs_approval" || r.Intent != sealed("release-7/deploy") || r.OperationID != "op_5" || r.Approval == nil || *r.Approval != want {
			t.Fatalf("%s: %+v", name, r)
		}
		for _, part := range []string{"A human must decide", `"Deploy web 1.4.2 to production"`, "before " + deadline,
			"Call operation_status with this intent later", "submit_write again with the same intent",
			"Do not create a new intent and do not change the method, path or body"} {
			if !strings.Contains(r.NextStep, part) {
				t.Errorf("%s: next_step %q lacks %q", name, r.NextStep, part)
			}
		}
		if !strings.Contains(r.Reason, "before "+deadline) || !strings.Contains(r.Reason, "nothing was sent to the API") {
			t.Errorf("%s: reason %q", name, r.Reason)
		}
	}
	write := map[string]any{"intent": sealed("release-7/deploy"), "method": "POST", "path": "/v1/services/web/deployments",
		"body": map[string]any{"artifact": "web-1.4.2", "environment": "production"}}
	r, _ := call(t, cs, "submit_write", write)
	check("submit_write", r)
	if r.Status != 202 || !strings.Contains(r.Body, `"apr_5"`) || sends.Load() != 1 {
		t.Fatalf("submit_write: %+v, %d sends", r, sends.Load())
	}
	st, _ := call(t, cs, "operation_status", map[string]any{"intent": sealed("release-7/deploy")})
	check("operation_status", st)
	if !strings.Contains(st.Body, `"target":"POST /v1/services/web/deployments"`) {
		t.Fatalf("operation_status body: %s", st.Body)
	}
	// Resuming asks the gateway, which says it still waits: nothing is sent.
	again, _ := call(t, cs, "submit_write", write)
	check("resume", again)
	if sends.Load() != 1 {
		t.Fatalf("a resume while pending sent it again: %d sends", sends.Load())
	}
	// Other results carry no approval: an empty one would read as involved.
	var n atomic.Int32
	created, res := call(t, connect(t, gatewayStub(t, &n).URL), "submit_write",
		map[string]any{"intent": sealed("t"), "method": "POST", "path": "/v1/tickets"})
	if b, _ := json.Marshal(res.StructuredContent); created.Kind != "created" || strings.Contains(string(b), `"approval"`) {
		t.Fatalf("created: %s", b)
	}
}
