package agent

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// Every outcome says what happened in words, whether anything reached the
// gateway, and whether the call stopped before the policy was done; and it
// is what the journal holds.
func TestEveryOutcomeSaysWhy(t *testing.T) {
	denied := problemAnswer(403, "approval_denied")
	for name, c := range map[string]struct {
		answers    []http.HandlerFunc
		lookup     http.HandlerFunc
		down       bool
		kind       Kind
		sent       Sent
		unfinished bool
		reason     []string
	}{
		"gateway down": {down: true, kind: Failed, sent: SentNo, unfinished: true,
			reason: []string{"gateway unreachable: connection refused", "gave up after 3 tries"}},
		"store unavailable past the budget": {answers: []http.HandlerFunc{problemAnswer(503, "store_unavailable")},
			kind: Failed, sent: SentYes, unfinished: true,
			reason: []string{"answered 503 store_unavailable: said by the script", "gave up after 3 tries"}},
		"rate limited past the time budget": {answers: []http.HandlerFunc{status(429, "Retry-After", "600")},
			kind: Failed, sent: SentYes, unfinished: true, reason: []string{"answered 429 (retry after 10m0s)"}},
		"validation": {answers: []http.HandlerFunc{problemAnswer(422, "invalid_command")}, kind: Rejected,
			sent: SentYes, reason: []string{"answered 422 invalid_command: said by the script"}},
		"approval denied": {answers: []http.HandlerFunc{denied}, kind: Failed, sent: SentYes,
			reason: []string{"answered 403 approval_denied"}},
		"created": {answers: []http.HandlerFunc{status(201)}, kind: Created, sent: SentYes,
			reason: []string{"answered 201"}},
		"lost, the gateway says unknown": {answers: []http.HandlerFunc{lost}, lookup: lookupSays("unknown"),
			kind: Unknown, sent: SentYes,
			reason: []string{"the answer was lost (the connection closed without an answer)", "the gateway holds it unknown"}},
		"lost, the gateway cannot be asked": {answers: []http.HandlerFunc{lost}, lookup: status(500), kind: Unknown,
			sent: SentMaybe, unfinished: true,
			reason: []string{"the answer was lost", "the gateway could not be asked what became of it (its lookup answered 500"}},
	} {
		t.Run(name, func(t *testing.T) {
			s := &script{answers: c.answers, lookup: c.lookup}
			client, _ := newScripted(t, s)
			client.Policy = Policy{MaxAttempts: 3}
			if c.down {
				client.BaseURL = refusedURL(t)
			}
			out, err := client.Do(context.Background(), Action{Intent: "i", Method: "POST", Path: "/v1/x"})
			if err != nil || out.Kind != c.kind || out.Sent != c.sent || out.Unfinished != c.unfinished {
				t.Fatalf("%+v %v", out, err)
			}
			for _, want := range c.reason {
				if !strings.Contains(out.Reason, want) {
					t.Errorf("reason %q lacks %q", out.Reason, want)
				}
			}
			e, _ := client.Journal.Latest(context.Background(), "i")
			if e.LastKind != out.Kind || e.Sent != out.Sent || e.LastStatus != out.Status {
				t.Fatalf("the journal %+v says otherwise than the outcome %+v", e, out)
			}
		})
	}
}

// An answer another process recorded stands over this call's lesser one,
// and the outcome says so: it is the journal's word, not this call's view.
func TestOutcomeIsTheJournalsWord(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{problemAnswer(409, "in_progress")}}
	client, _ := newScripted(t, s)
	client.Policy = Policy{MaxAttempts: 1}
	ctx := context.Background()
	a := Action{Intent: "shared", Method: "POST", Path: "/v1/x"}
	e, _, _ := client.Prepare(ctx, a)
	s.onSend = func(n int) { // another process gets the answer first
		theirs, _ := client.Journal.beginAttempt(ctx, e.Key)
		client.Journal.record(ctx, e.Key, theirs, Outcome{Kind: Created, Status: 201, OperationID: "op_1"}, true, SentYes)
	}
	out, err := client.Do(ctx, a)
	if err != nil || out.Kind != Created || out.Status != 201 || len(out.Body) != 0 ||
		!strings.Contains(out.Reason, "an earlier answer already said created") {
		t.Fatalf("%+v %v", out, err)
	}
}

// A resume that only asks the gateway (it says unknown) keeps the status of
// the answer that made the intent unknown, in the outcome and the journal.
func TestAskingKeepsTheLastStatus(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{status(500)}, lookup: lookupSays("unknown")}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	a := Action{Intent: "charge", Method: "POST", Path: "/v1/x"}
	for try := range 2 {
		out, err := client.Do(ctx, a)
		if err != nil || out.Kind != Unknown || out.Status != 500 || s.count() != 1 {
			t.Fatalf("try %d: %+v %v, %d sends", try, out, err, s.count())
		}
	}
	pending, _ := client.Journal.Pending(ctx)
	if len(pending) != 1 || pending[0].LastStatus != 500 {
		t.Fatalf("pending: %+v", pending)
	}
}

// An intent the journal saw refused, whose operation the gateway has since
// purged, stays refused: it is not sent, and it may be revised, where it
// used to turn unknown and block every new action for good.
func TestPurgedRefusalStaysRefused(t *testing.T) {
	gone := false
	s := &script{answers: []http.HandlerFunc{problemAnswer(422, "invalid_command")}, lookup: func(w http.ResponseWriter, r *http.Request) {
		if gone {
			problemAnswer(404, "not_found")(w, r)
			return
		}
		lookupSays("failed")(w, r)
	}}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	a := Action{Intent: "ticket", Method: "POST", Path: "/v1/x", Body: []byte(`{"title":""}`)}
	client.Do(ctx, a)
	gone = true
	out, err := client.Do(ctx, a)
	if err != nil || out.Kind != Rejected || !out.Expired || s.count() != 1 || !strings.Contains(out.Reason, "last saw it rejected") {
		t.Fatalf("%+v %v, %d sends", out, err, s.count())
	}
	a.Mode, a.Body = Revise, []byte(`{"title":"Disk full"}`)
	if _, err := client.Do(ctx, a); err != nil {
		t.Fatalf("revise: %v", err)
	}
}
