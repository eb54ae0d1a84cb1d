package server_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
)

// headerUpstream keeps the headers of the last request it got.
type headerUpstream struct {
	mu   sync.Mutex
	last http.Header
	n    int
}

func (u *headerUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.last, u.n = r.Header.Clone(), u.n+1
	u.mu.Unlock()
	w.WriteHeader(201)
}

func (u *headerUpstream) got() (http.Header, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last, u.n
}

// TestApprovedRunSendsWhatTheApproverSaw (issue 24, 7.7): the retry that
// executes an approved payment forwards the headers the approver was
// shown (the approval view lists them, credentials left out), with its
// own tracing and content headers: a header added or changed since, such
// as Stripe-Account or X-Dry-Run, never reaches the upstream.
func TestApprovedRunSendsWhatTheApproverSaw(t *testing.T) {
	routes := `  - match: POST /v1/payments
    upstream: bare
    approval: {ttl: 1m, approvers: [admin], summary: 'Pay'}
`
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		up := &headerUpstream{}
		e := newEnvWith(t, db.Open(t), db.DSN, routes, up)
		body := `{"amount_minor":4999900,"currency":"EUR"}`
		first := e.do("POST", "/v1/payments", "agent-token", body, "Idempotency-Key", "pay-1",
			"X-Target-Cluster", "eu-1", "Traceparent", "00-11111111111111111111111111111111-1111111111111111-01")
		var acc contract.Accepted
		if err := json.Unmarshal([]byte(first.body), &acc); err != nil || first.status != 202 {
			t.Fatalf("the payment asks: %d %s", first.status, first.body)
		}
		r := e.do("GET", "/_idem/v1/approvals/"+acc.Approval.ID, "alice-token", "")
		var v contract.ApprovalView
		err := json.Unmarshal([]byte(r.body), &v)
		if shown := http.Header(v.Headers); err != nil || shown.Get("X-Target-Cluster") != "eu-1" ||
			shown["Authorization"] != nil || shown["Traceparent"] != nil || shown["Idempotency-Key"] != nil {
			t.Fatalf("the approver is shown %d %s", r.status, r.body)
		}
		decision, _ := json.Marshal(contract.Decision{Fingerprint: v.Fingerprint, Note: "eu-1, as asked"})
		if d := e.do("POST", "/_idem/v1/approvals/"+v.ID+"/approve", "alice-token", string(decision)); d.status != 200 {
			t.Fatalf("approve: %d %s", d.status, d.body)
		}
		run := e.do("POST", "/v1/payments", "agent-token", body, "Idempotency-Key", "pay-1",
			"X-Target-Cluster", "us-1", "X-Dry-Run", "false", "Stripe-Account", "acct_ATTACKER",
			"Traceparent", "00-22222222222222222222222222222222-2222222222222222-01")
		h, n := up.got()
		if run.status != 201 || n != 1 {
			t.Fatalf("the approved retry: %d %s, %d requests upstream", run.status, run.body, n)
		}
		if h.Get("X-Target-Cluster") != "eu-1" || h.Values("X-Dry-Run") != nil || h.Values("Stripe-Account") != nil ||
			h.Get("Traceparent") != "00-22222222222222222222222222222222-2222222222222222-01" ||
			h.Get("Content-Type") != "application/json" {
			t.Fatalf("the upstream got %v", h)
		}
	})
}
