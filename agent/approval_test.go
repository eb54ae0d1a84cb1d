package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

const deploySummary = "Deploy web 1.4.2 to production"

// approvalAnswer is the gateway's 202 for an operation waiting for the
// approval id, which expires at exp.
func approvalAnswer(code, id string, exp time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/_idem/v1/operations/op_1")
		w.Header().Set("Idempotency-Operation", "op_1")
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(contract.Accepted{Code: code, Detail: "a human must approve this operation",
			OperationID: "op_1", State: ledger.Prepared, StatusURL: "/_idem/v1/operations/op_1",
			Approval: contract.AcceptedApproval{ID: id, Status: ledger.ApprovalPending, ExpiresAt: exp,
				Summary: deploySummary, URL: "/_idem/v1/approvals/" + id}})
	}
}

// preferWait is the seconds a request's Prefer: wait asks for (0: none).
func preferWait(h http.Header) int {
	v, ok := strings.CutPrefix(h.Get("Prefer"), "wait=")
	n, err := strconv.Atoi(v)
	if !ok || err != nil {
		return 0
	}
	return n
}

// held is the gateway holding a request for its Prefer: wait before
// answering with h, as it does while a human has not decided: the client's
// clock moves on by that much.
func held(clk **fakeClock, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		(*clk).advance(time.Duration(preferWait(r.Header)) * time.Second)
		h(w, r)
	}
}

func (f *fakeClock) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

var deploy = Action{Intent: "release-7/deploy-web", Method: "POST", Path: "/v1/services/web/deployments",
	Body: []byte(`{"artifact":"web-1.4.2","environment":"production"}`)}

// sameKeyEverywhere checks every request carried the outcome's key, and
// that the journal holds that one key for the intent: no new key was made.
func sameKeyEverywhere(t *testing.T, c *Client, s *script, out Outcome) {
	t.Helper()
	for i, h := range s.sends {
		if h.Get("Idempotency-Key") != out.Key || out.Key == "" {
			t.Fatalf("send %d carried key %q, want %q", i+1, h.Get("Idempotency-Key"), out.Key)
		}
	}
	e, err := c.Journal.Latest(context.Background(), deploy.Intent)
	if err != nil || e.Key != out.Key || e.Version != 1 || e.Attempts != s.count() {
		t.Fatalf("journal %+v %v, want version 1 with key %s and %d attempts", e, err, out.Key, s.count())
	}
}

func waits(s *script) []int {
	var w []int
	for _, h := range s.sends {
		w = append(w, preferWait(h))
	}
	return w
}

// Without an approval wait, a 202 is needs_approval at once, with the
// approval the gateway named and what it asks in words.
func TestNeedsApprovalSaysWhatAndByWhen(t *testing.T) {
	clk := new(*fakeClock)
	exp := time.Date(2026, 12, 2, 12, 15, 0, 0, time.UTC)
	s := &script{answers: []http.HandlerFunc{approvalAnswer("approval_required", "apr_1", exp)}}
	client, c := newScripted(t, s)
	*clk = c
	out, err := client.Do(context.Background(), deploy)
	if err != nil || out.Kind != NeedsApproval || s.count() != 1 || out.Unfinished || out.Sent != SentYes {
		t.Fatalf("%+v %v, %d sends", out, err, s.count())
	}
	want := ApprovalInfo{ID: "apr_1", Status: ledger.ApprovalPending, Summary: deploySummary, ExpiresAt: exp,
		URL: "/_idem/v1/approvals/apr_1"}
	if out.Approval == nil || *out.Approval != want {
		t.Fatalf("approval %+v, want %+v", out.Approval, want)
	}
	for _, part := range []string{"answered 202 approval_required", `a human must approve "` + deploySummary + `"`,
		"before 2026-12-02T12:15:00Z", "nothing was sent to the API", "Resuming this intent (the same key) runs it once approved"} {
		if !strings.Contains(out.Reason, part) {
			t.Errorf("reason %q lacks %q", out.Reason, part)
		}
	}
	if len(c.sleeps) != 0 {
		t.Fatalf("slept %v", c.sleeps)
	}
	b, _ := json.Marshal(out)
	if !strings.Contains(string(b), `"approval":{"id":"apr_1","status":"pending","summary":"`+deploySummary+
		`","expires_at":"2026-12-02T12:15:00Z","url":"/_idem/v1/approvals/apr_1"}`) {
		t.Fatalf("outcome JSON %s", b)
	}
}

// With an approval wait, the client sends the same request with the same
// key and Prefer: wait until the decision: approved, it is run.
func TestApprovalWaitRunsItOnceApproved(t *testing.T) {
	clk := new(*fakeClock)
	exp := time.Date(2026, 12, 2, 12, 15, 0, 0, time.UTC)
	var firstKey string
	s := &script{answers: []http.HandlerFunc{
		approvalAnswer("approval_required", "apr_1", exp),
		held(clk, approvalAnswer("approval_required", "apr_1", exp)),
		func(w http.ResponseWriter, r *http.Request) { // approved: the gateway runs it
			if r.Header.Get("Idempotency-Key") != firstKey || preferWait(r.Header) == 0 {
				problemAnswer(400, "invalid_key")(w, r)
				return
			}
			status(201)(w, r)
		},
	}}
	client, c := newScripted(t, s)
	*clk = c
	client.Policy = Policy{ApprovalWait: 10 * time.Minute}
	s.onSend = func(n int) {
		if n == 1 {
			firstKey = s.sends[0].Get("Idempotency-Key")
		}
	}
	out, err := client.Do(context.Background(), deploy)
	if err != nil || out.Kind != Created || out.Status != 201 || s.count() != 3 || out.Unfinished || out.Approval != nil {
		t.Fatalf("%+v %v, %d sends", out, err, s.count())
	}
	sameKeyEverywhere(t, client, s, out)
	// The first send is the write, which asks for no wait (the gateway
	// would hold it for the decision); the next two wait for it, up to
	// half the HTTP client's 30s timeout each.
	if fmt.Sprint(waits(s)) != "[0 15 15]" || len(c.sleeps) != 0 {
		t.Fatalf("Prefer: wait %v, slept %v", waits(s), c.sleeps)
	}
	if e, _ := client.Journal.Latest(context.Background(), deploy.Intent); e.LastKind != Created || e.LastStatus != 201 {
		t.Fatalf("journal %+v", e)
	}
	// A resume replays it; it does not wait again.
	s.answers = append(s.answers, status(201, "Idempotent-Replayed", "true"))
	s.lookup = lookupSays("succeeded")
	if out, _ := client.Do(context.Background(), deploy); out.Kind != Replayed || out.Key != firstKey {
		t.Fatalf("resume: %+v", out)
	}
}

// A denial while waiting is failed, for good, and says what was denied.
func TestApprovalWaitEndsInADenial(t *testing.T) {
	clk := new(*fakeClock)
	exp := time.Date(2026, 12, 2, 12, 15, 0, 0, time.UTC)
	s := &script{answers: []http.HandlerFunc{approvalAnswer("approval_required", "apr_1", exp),
		held(clk, problemAnswer(403, "approval_denied"))}}
	client, c := newScripted(t, s)
	*clk = c
	client.Policy = Policy{ApprovalWait: 10 * time.Minute}
	out, err := client.Do(context.Background(), deploy)
	if err != nil || out.Kind != Failed || out.Status != 403 || out.Unfinished || s.count() != 2 || out.Approval != nil ||
		!strings.Contains(out.Reason, "answered 403 approval_denied") || !strings.Contains(out.Reason, deploySummary) {
		t.Fatalf("%+v %v, %d sends", out, err, s.count())
	}
	sameKeyEverywhere(t, client, s, out)
	if e, _ := client.Journal.Latest(context.Background(), deploy.Intent); e.LastKind != Failed {
		t.Fatalf("journal %+v", e)
	}
}

// A wait that runs out is needs_approval with the approval, and every
// request carried the same key; each asked for what was left, at most 60s.
func TestApprovalWaitRunsOut(t *testing.T) {
	clk := new(*fakeClock)
	exp := time.Date(2026, 12, 2, 12, 15, 0, 0, time.UTC)
	s := &script{answers: []http.HandlerFunc{approvalAnswer("approval_required", "apr_1", exp),
		held(clk, approvalAnswer("approval_required", "apr_1", exp))}}
	client, c := newScripted(t, s)
	*clk = c
	client.HTTP = &http.Client{} // no timeout: the 60s cap is the limit
	client.Policy = Policy{ApprovalWait: 150 * time.Second, MaxAttempts: 1}
	out, err := client.Do(context.Background(), deploy)
	if err != nil || out.Kind != NeedsApproval || !out.Unfinished || out.Approval == nil || out.Approval.ID != "apr_1" ||
		out.Approval.Summary != deploySummary || !out.Approval.ExpiresAt.Equal(exp) {
		t.Fatalf("%+v %v", out, err)
	}
	if fmt.Sprint(waits(s)) != "[0 60 60 30]" || len(c.sleeps) != 0 {
		t.Fatalf("Prefer: wait %v, slept %v", waits(s), c.sleeps)
	}
	for _, part := range []string{deploySummary, "before 2026-12-02T12:15:00Z", "nothing was sent to the API",
		"no decision within the approval wait (2m30s)"} {
		if !strings.Contains(out.Reason, part) {
			t.Errorf("reason %q lacks %q", out.Reason, part)
		}
	}
	sameKeyEverywhere(t, client, s, out)
	if e, _ := client.Journal.Latest(context.Background(), deploy.Intent); e.LastKind != NeedsApproval || e.LastStatus != 202 {
		t.Fatalf("journal %+v", e)
	}
}

// An approval that expires undecided while the client waits is replaced by
// a new one for the same operation: still needs_approval, now with the new
// approval, under the same key.
func TestApprovalExpiredIsANewApproval(t *testing.T) {
	clk := new(*fakeClock)
	first, second := time.Date(2026, 12, 2, 12, 0, 15, 0, time.UTC), time.Date(2026, 12, 2, 12, 15, 15, 0, time.UTC)
	s := &script{answers: []http.HandlerFunc{approvalAnswer("approval_required", "apr_1", first),
		held(clk, approvalAnswer("approval_expired", "apr_2", second)),
		held(clk, approvalAnswer("approval_required", "apr_2", second))}}
	client, c := newScripted(t, s)
	*clk = c
	client.Policy = Policy{ApprovalWait: 20 * time.Second}
	out, err := client.Do(context.Background(), deploy)
	if err != nil || out.Kind != NeedsApproval || out.Approval == nil || out.Approval.ID != "apr_2" ||
		!out.Approval.ExpiresAt.Equal(second) || s.count() != 3 || fmt.Sprint(waits(s)) != "[0 15 5]" {
		t.Fatalf("%+v %v, Prefer: wait %v", out, err, waits(s))
	}
	sameKeyEverywhere(t, client, s, out)

	// Without a wait, the approval_expired 202 itself is needs_approval
	// with the new approval, and says so.
	s2 := &script{answers: []http.HandlerFunc{approvalAnswer("approval_expired", "apr_3", second)}}
	client2, _ := newScripted(t, s2)
	out, err = client2.Do(context.Background(), deploy)
	if err != nil || out.Kind != NeedsApproval || out.Approval == nil || out.Approval.ID != "apr_3" ||
		!strings.Contains(out.Reason, "answered 202 approval_expired: the earlier approval request expired undecided, and a new one was opened") ||
		!strings.Contains(out.Reason, "before 2026-12-02T12:15:15Z") {
		t.Fatalf("%+v %v", out, err)
	}
}

// A gateway that answers at once despite Prefer: wait is not spun on: the
// client pauses longer each time, and stops when the wait is spent.
func TestApprovalWaitDoesNotSpin(t *testing.T) {
	exp := time.Date(2026, 12, 2, 12, 15, 0, 0, time.UTC)
	s := &script{answers: []http.HandlerFunc{approvalAnswer("approval_required", "apr_1", exp)}}
	client, c := newScripted(t, s)
	client.Policy = Policy{ApprovalWait: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.onSend = func(n int) {
		if n > 20 { // spinning: the fake clock only moves when the client pauses
			cancel()
		}
	}
	out, err := client.Do(ctx, deploy)
	want := "[100ms 200ms 400ms 800ms 1.6s 3.2s]"
	if err != nil || out.Kind != NeedsApproval || s.count() != 8 || fmt.Sprint(c.sleeps) != want {
		t.Fatalf("%+v %v: %d sends, slept %v, want %s", out, err, s.count(), c.sleeps, want)
	}
	sameKeyEverywhere(t, client, s, out)
}

// The gateway turning a waiting request away for now does not lose the
// approval: the outcome stays needs_approval, with it.
func TestNotNowWhileWaitingKeepsTheApproval(t *testing.T) {
	exp := time.Date(2026, 12, 2, 12, 15, 0, 0, time.UTC)
	s := &script{answers: []http.HandlerFunc{approvalAnswer("approval_required", "apr_1", exp),
		problemAnswer(503, "store_unavailable")}}
	client, _ := newScripted(t, s)
	client.Policy = Policy{ApprovalWait: time.Minute, MaxAttempts: 2}
	out, err := client.Do(context.Background(), deploy)
	if err != nil || out.Kind != NeedsApproval || out.Approval == nil || out.Approval.ID != "apr_1" || s.count() != 3 ||
		!strings.Contains(out.Reason, "gave up after 2 tries") || !strings.Contains(out.Reason, deploySummary) {
		t.Fatalf("%+v %v, %d sends", out, err, s.count())
	}
	sameKeyEverywhere(t, client, s, out)
}

// operationView is the gateway's view of op_1, prepared, with its approval.
func operationView(status ledger.ApprovalStatus, exp time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		created := exp.Add(-15 * time.Minute)
		v := contract.View{Summary: contract.Summary{ID: "op_1", Key: r.URL.Query().Get("key"), State: ledger.Prepared,
			Route: "POST /v1/services/{service}/deployments", Approval: &contract.ApprovalView{ID: "apr_1", Status: status,
				Summary: deploySummary, Target: "POST /v1/services/web/deployments", CreatedAt: &created, ExpiresAt: exp}},
			History: []contract.HistoryEntry{}}
		json.NewEncoder(w).Encode(v)
	}
}

// A resume learns the approval from the gateway's view, and sends nothing
// while it is pending; once it lapsed undecided (the view still says
// pending), the resume sends the same request, which opens a new one.
func TestResumeReadsTheApprovalFromTheView(t *testing.T) {
	exp := time.Date(2026, 12, 2, 12, 15, 0, 0, time.UTC)
	s := &script{answers: []http.HandlerFunc{approvalAnswer("approval_required", "apr_1", exp),
		approvalAnswer("approval_expired", "apr_2", exp.Add(time.Hour))}, lookup: operationView(ledger.ApprovalPending, exp)}
	client, c := newScripted(t, s)
	ctx := context.Background()
	client.Do(ctx, deploy)
	out, err := client.Do(ctx, deploy)
	if err != nil || out.Kind != NeedsApproval || s.count() != 1 || out.Approval == nil || out.Approval.ID != "apr_1" ||
		out.Approval.Summary != deploySummary || !strings.Contains(out.Reason, "it waits for a human's approval at the gateway") ||
		!strings.Contains(out.Reason, "before 2026-12-02T12:15:00Z") {
		t.Fatalf("resume while pending: %+v %v, %d sends", out, err, s.count())
	}
	st, err := client.Status(ctx, deploy.Intent)
	if o := st.Outcome(); err != nil || o.Kind != NeedsApproval || o.Unfinished || o.Approval == nil ||
		o.Approval.ID != "apr_1" || !strings.Contains(o.Reason, deploySummary) {
		t.Fatalf("status while pending: %+v %v", o, err)
	}

	c.advance(time.Hour) // past its expiry, undecided
	st, _ = client.Status(ctx, deploy.Intent)
	if o := st.Outcome(); o.Kind != NeedsApproval || !o.Unfinished || !strings.Contains(o.Reason, "lapsed at 2026-12-02T12:15:00Z") {
		t.Fatalf("status once lapsed: %+v", o)
	}
	out, err = client.Do(ctx, deploy)
	if err != nil || out.Kind != NeedsApproval || s.count() != 2 || out.Approval == nil || out.Approval.ID != "apr_2" {
		t.Fatalf("resume once lapsed: %+v %v, %d sends", out, err, s.count())
	}
	sameKeyEverywhere(t, client, s, out)
}

// An operation approved while nobody waited: the view says so, and a
// resume sends it, which runs it.
func TestResumeRunsItOnceApproved(t *testing.T) {
	exp := time.Date(2026, 12, 2, 12, 15, 0, 0, time.UTC)
	s := &script{answers: []http.HandlerFunc{approvalAnswer("approval_required", "apr_1", exp), status(201)},
		lookup: operationView(ledger.ApprovalApproved, exp)}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	client.Do(ctx, deploy)
	st, _ := client.Status(ctx, deploy.Intent)
	if o := st.Outcome(); o.Kind != Failed || !o.Unfinished || o.Approval == nil || o.Approval.Status != ledger.ApprovalApproved ||
		!strings.Contains(o.Reason, "its approval is approved: resuming this intent (the same key) runs it") {
		t.Fatalf("status: %+v", o)
	}
	out, err := client.Do(ctx, deploy)
	if err != nil || out.Kind != Created || s.count() != 2 {
		t.Fatalf("resume: %+v %v, %d sends", out, err, s.count())
	}
	sameKeyEverywhere(t, client, s, out)
}
