package agent

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// Status reads as an Outcome: what the gateway says, or why it could not
// say, and whether resuming would go on.
func TestStatusReadsAsAnOutcome(t *testing.T) {
	gateway := "lookup fails"
	s := &script{answers: []http.HandlerFunc{lost}, lookup: func(w http.ResponseWriter, r *http.Request) {
		switch gateway {
		case "lookup fails":
			w.WriteHeader(500)
		case "holds nothing":
			problemAnswer(404, "not_found")(w, r)
		}
	}}
	client, _ := newScripted(t, s)
	client.Policy = Policy{MaxAttempts: 1}
	ctx := context.Background()
	if out, _ := client.Do(ctx, Action{Intent: "lost", Method: "POST", Path: "/v1/x"}); out.Kind != Unknown || out.Sent != SentMaybe {
		t.Fatalf("lost, and the gateway cannot say: %+v", out)
	}
	up := client.BaseURL
	for _, c := range []struct {
		gateway, reason string
		kind            Kind
	}{
		{"down", "the gateway could not be asked: connection refused; the journal last recorded unknown", Unknown},
		// The gateway holds nothing within its retention: it was not
		// applied, and a resume sends it (where Status said unknown,
		// and "ask again later" for ever).
		{"holds nothing", "never reserved", Failed},
	} {
		gateway, client.BaseURL = c.gateway, up
		if c.gateway == "down" {
			client.BaseURL = refusedURL(t)
		}
		st, err := client.Status(ctx, "lost")
		o := st.Outcome()
		if err != nil || o.Kind != c.kind || !o.Unfinished || o.Expired || !strings.Contains(o.Reason, c.reason) {
			t.Fatalf("%s: %+v %v", c.gateway, o, err)
		}
	}
	if out, _ := client.Do(ctx, Action{Intent: "lost", Method: "POST", Path: "/v1/x"}); s.count() != 2 {
		t.Fatalf("the resume Status promised was not sent: %+v", out)
	}
}

// TestA404ThatIsNoProblemIsNoAnswer: a lookup answered 404 without the
// control API's not_found problem (the agent pointed at an API that has
// no idemgate in front, say) does not say "it holds nothing": after a lost
// answer, the write is not sent again, since it may have been performed.
func TestA404ThatIsNoProblemIsNoAnswer(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{lost}, lookup: func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r)
	}}
	client, _ := newScripted(t, s)
	client.Policy = Policy{MaxAttempts: 3}
	out, _ := client.Do(context.Background(), Action{Intent: "plain-404", Method: "POST", Path: "/v1/x"})
	if out.Kind != Unknown || out.Sent != SentMaybe || s.count() != 1 || !strings.Contains(out.Reason, "answered 404") {
		t.Fatalf("a plain 404 was taken for an answer: %+v, %d sends", out, s.count())
	}
}
