package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/scenarios"
	"github.com/idemgate/idemgate/ledger"
)

// The drills of the workflow article's checklist, of the API article, and
// of the three domains. Each counts effects at the ops API.

func ticket(event, title string) string { return scenarios.Ticket(title, event) }

func want(t *testing.T, r reply, status int, code string) {
	t.Helper()
	if r.err != nil || r.status != status || problemCode(r) != code {
		t.Fatalf("want %d %q, got %d %q (err %v): %s", status, code, r.status, problemCode(r), r.err, r.body)
	}
}

func wantState(t *testing.T, op *ledger.Operation, st ledger.State) {
	t.Helper()
	if op.State != st {
		t.Fatalf("operation %s is %s, want %s", op.Key, op.State, st)
	}
}

// untilSettled retries a keyed request while the gateway answers
// in_progress (an owner's lease still running), and returns the first
// other answer.
func (d *drill) untilSettled(path, key, body string) reply {
	d.t.Helper()
	return d.untilSettledBy(func() reply { return d.keyed(path, key, body) })
}

// untilSettledBy repeats send while it is answered in_progress, and
// returns the first other answer.
func (d *drill) untilSettledBy(send func() reply) reply {
	d.t.Helper()
	var r reply
	waitFor(d.t, "the operation to leave executing", func() bool {
		r = send()
		return r.err == nil && problemCode(r) != "in_progress"
	})
	return r
}

// 1. The same request sent twice, one after the other.
func TestDrillSameRequestTwice(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	first := d.keyed("/v1/tickets", "k-1", ticket("", "Disk full on db-1"))
	second := d.keyed("/v1/tickets", "k-1", ticket("", "Disk full on db-1"))
	if first.status != 201 || second.status != 201 || second.body != first.body ||
		second.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %+v\nsecond %+v", first, second)
	}
	d.wantEffects("tickets_created", 1)
	wantState(t, d.operation("k-1"), ledger.Succeeded)
}

// 2. Two workers send the same key at the same moment.
func TestDrillTwoWorkersSameKey(t *testing.T) {
	t.Parallel()
	// The first holds the key, its write held at the API, until the
	// second has its answer: the copies meet however late the second is.
	d := newDrill(t, setup{upstreamTimeout: "1m"})
	d.hold(1)
	var replies [2]reply
	concurrently(2, func(i int) {
		replies[i] = d.keyed("/v1/tickets", "k-2", ticket("", "Queue backlog"))
		d.release()
	})
	codes := []string{problemCode(replies[0]), problemCode(replies[1])}
	slices.Sort(codes)
	if codes[0] != "" || codes[1] != "in_progress" {
		t.Fatalf("want one answer and one in_progress: %+v", replies)
	}
	// With Prefer: wait, every worker gets the one answer: the demo's 50
	// concurrent copies.
	_, story := d.play(scenarios.ActConcurrent)
	if !strings.Contains(story, "1 executed, 49 replayed") {
		t.Fatalf("want one executed, the others its replay:\n%s", story)
	}
	d.wantEffects("tickets_created", 2)
}

// 3. The process dies before the upstream call: nothing was sent, but
// nobody alive can say so, so the operation is unknown, not re-sent. An
// operator who proves it was not applied resolves it to prepared, and the
// retry then performs it once.
func TestDrillDiesBeforeUpstreamCall(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{hold: time.Minute})
	body := ticket("evt-3", "Certificate expires in 3 days")
	go d.keyed("/v1/tickets", "k-3", body)
	waitFor(t, "the reservation", func() bool { return d.exists("k-3") })
	d.gw.Kill()
	d.wantEffects("tickets_created", 0)

	d.gw = d.startGateway(0)
	r := d.untilSettled("/v1/tickets", "k-3", body)
	want(t, r, 409, "outcome_unknown")
	op := d.operation("k-3")
	wantState(t, op, ledger.Unknown)
	d.wantEffects("tickets_created", 0)

	res := d.control("POST", "/operations/"+op.ID+"/resolve",
		`{"state":"prepared","note":"no ticket carries evt-3: never applied"}`)
	if res.status != 200 {
		t.Fatalf("resolve: %+v", res)
	}
	if r := d.keyed("/v1/tickets", "k-3", body); r.status != 201 {
		t.Fatalf("retry after resolution: %+v", r)
	}
	d.wantEffects("tickets_created", 1)
	got := d.history(d.operation("k-3"))
	if w := []string{"none>executing", "executing>unknown", "unknown>prepared", "prepared>executing",
		"executing>succeeded"}; !slices.Equal(got, w) {
		t.Fatalf("history %v, want %v", got, w)
	}
}

// 4. The process dies after the effect and before recording it: the
// gateway is SIGKILLed while the ops API performs the write.
func TestDrillDiesAfterEffectBeforeRecording(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{upstreamTimeout: "1m"})
	d.hold(1)
	body := ticket("evt-4", "Replica lag 40s")
	go d.keyed("/v1/tickets", "k-4", body)
	d.waitInFlight(1) // forwarded, and the API is working on it
	d.gw.Kill()
	d.release()
	waitFor(t, "the effect", func() bool { return d.effects()["tickets_created"] == 1 })

	d.gw = d.startGateway(0)
	want(t, d.untilSettled("/v1/tickets", "k-4", body), 409, "outcome_unknown")
	op := d.operation("k-4")
	wantState(t, op, ledger.Unknown)
	time.Sleep(300 * time.Millisecond)
	want(t, d.keyed("/v1/tickets", "k-4", body), 409, "outcome_unknown")
	d.wantEffects("tickets_created", 1)

	// Reconciliation: the operator finds the ticket and says so.
	if r := d.control("POST", "/operations/"+op.ID+"/resolve",
		`{"state":"succeeded","note":"ticket 1 carries evt-4"}`); r.status != 200 {
		t.Fatalf("resolve: %+v", r)
	}
	r := d.keyed("/v1/tickets", "k-4", body)
	if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(r.body, `"succeeded"`) {
		t.Fatalf("after resolution: %+v", r)
	}
	d.wantEffects("tickets_created", 1)
}

// 5. The upstream's response is lost after it committed.
func TestDrillResponseLost(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	d.fault(`{"drop_response_after_commit":1}`)
	body := ticket("", "Backup job failed")
	r := d.keyed("/v1/tickets", "k-5", body)
	want(t, r, 502, "outcome_unknown")
	for range 3 {
		want(t, d.keyed("/v1/tickets", "k-5", body), 409, "outcome_unknown")
	}
	d.wantEffects("tickets_created", 1)
	wantState(t, d.operation("k-5"), ledger.Unknown)
}

// 6. The payload changes under the same key: the demo's first two acts
// (a lost answer, then its key reused for another ticket, refused without
// revealing the stored request). The first request stays the operation's.
func TestDrillPayloadChanged(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	s, _ := d.play(scenarios.ActLostAnswer, scenarios.ActChangedPayload)
	d.wantEffects("tickets_created", 1)
	op := d.operation(s.Key("ticket"))
	wantState(t, op, ledger.Succeeded)
	if got := d.history(op); !slices.Equal(got, []string{"none>executing", "executing>succeeded"}) {
		t.Fatalf("history %v", got)
	}
}

// 7. A retry arrives after the lease has expired. The owner's heartbeats
// keep its lease while it lives; once it is dead and its lease lapsed, a
// retry on another instance finds the operation unknown and does not re-send
// it, unless the upstream honours the key, which then answers the re-sent
// request from its own record.
func TestDrillRetryAfterLeaseExpired(t *testing.T) {
	t.Parallel()
	t.Run("upstream ignores keys", func(t *testing.T) {
		t.Parallel()
		// A lease of 3s, heartbeats every second: a loaded machine that
		// holds the gateway back a few hundred ms does not let it lapse.
		d := newDrill(t, setup{hold: time.Minute, ticketLease: "3s"})
		body := ticket("", "Pager storm")
		go d.keyed("/v1/tickets", "k-7", body)
		waitFor(t, "the reservation", func() bool { return d.exists("k-7") })
		time.Sleep(3500 * time.Millisecond) // longer than the lease
		r := d.keyed("/v1/tickets", "k-7", body)
		want(t, r, 409, "in_progress")
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("in_progress without Retry-After: %v", r.header)
		}
		other := d.startGateway(0)
		d.gw.Kill()
		d.gw = other
		want(t, d.untilSettled("/v1/tickets", "k-7", body), 409, "outcome_unknown")
		d.wantEffects("tickets_created", 0)
	})
	t.Run("upstream honours the key", func(t *testing.T) {
		t.Parallel()
		d := newDrill(t, setup{idempotentAPI: true, upstreamTimeout: "1m"})
		d.hold(1)
		body := ticket("", "Pager storm")
		go d.keyed("/v1/tickets", "k-7", body)
		d.waitInFlight(1)
		other := d.startGateway(0)
		d.gw.Kill()
		d.gw = other
		d.release()
		waitFor(t, "the effect", func() bool { return d.effects()["tickets_created"] == 1 })
		r := d.untilSettled("/v1/tickets", "k-7", body)
		if r.status != 201 || !strings.Contains(r.body, `"created":true`) {
			t.Fatalf("re-sent with the same key: %+v", r)
		}
		d.wantEffects("tickets_created", 1)
		op := d.operation("k-7")
		wantState(t, op, ledger.Succeeded)
		if got := d.history(op); !slices.Contains(got, "unknown>executing") {
			t.Fatalf("history %v: want a re-send from unknown", got)
		}
	})
}

// 8. A rate limit (429 with Retry-After): the retry after the delay
// performs the effect exactly once.
func TestDrillRateLimitRetryAfter(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	d.fault(`{"status":{"code":429,"count":1}}`)
	body := ticket("", "Rate limited")
	r := d.keyed("/v1/tickets", "k-8", body)
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("want the upstream's 429 and Retry-After: %+v", r)
	}
	wantState(t, d.operation("k-8"), ledger.Prepared)
	d.wantEffects("tickets_created", 0)
	var secs int
	fmt.Sscan(r.header.Get("Retry-After"), &secs)
	time.Sleep(time.Duration(secs) * time.Second)
	if r := d.keyed("/v1/tickets", "k-8", body); r.status != 201 {
		t.Fatalf("after Retry-After: %+v", r)
	}
	if r := d.keyed("/v1/tickets", "k-8", body); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("third send: %+v", r)
	}
	d.wantEffects("tickets_created", 1)
	if op := d.operation("k-8"); op.Attempts != 2 {
		t.Fatalf("%d attempts, want 2", op.Attempts)
	}
}

// 9. An identical webhook arrives several times: the key is its delivery id.
func TestDrillWebhookSeveralTimes(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	tk := d.keyed("/v1/tickets", "k-9", ticket("", "Webhook target"))
	var created struct{ ID int64 }
	if err := json.Unmarshal([]byte(tk.body), &created); err != nil || tk.status != 201 {
		t.Fatalf("ticket: %+v", tk)
	}
	path := fmt.Sprintf("/v1/tickets/%d/comments", created.ID)
	body := `{"comment_id":"c-1","body":"build 812 failed"}`
	var answers [5]reply
	concurrently(3, func(i int) {
		answers[i] = d.send("POST", path, body, "X-Delivery-Id", "dlv-77", "Prefer", "wait=10")
	})
	for i := 3; i < 5; i++ {
		answers[i] = d.send("POST", path, body, "X-Delivery-Id", "dlv-77")
	}
	for _, a := range answers {
		if a.status != 201 || a.body != answers[0].body {
			t.Fatalf("deliveries: %+v", answers)
		}
	}
	d.wantEffects("comments_added", 1)
	if r := d.send("POST", path, body, "X-Delivery-Id", "dlv-78"); r.status != 201 {
		t.Fatal(r)
	}
	d.wantEffects("comments_added", 2) // a new delivery is a new event (the API is naive)
}

// 10. An operator deliberately asks for a new, identical action: a new key
// is a new operation, and both are visible.
func TestDrillOperatorAsksForNewAction(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	body := ticket("", "Rotate the API keys")
	a := d.keyed("/v1/tickets", "k-10a", body)
	b := d.keyed("/v1/tickets", "k-10b", body)
	if a.status != 201 || b.status != 201 || a.body == b.body {
		t.Fatalf("two intended actions: %+v %+v", a, b)
	}
	d.wantEffects("tickets_created", 2)
	ida, idb := a.header.Get("Idempotency-Operation"), b.header.Get("Idempotency-Operation")
	list := d.control("GET", "/operations?state=succeeded", "")
	if ida == idb || !strings.Contains(list.body, ida) || !strings.Contains(list.body, idb) {
		t.Fatalf("operations %s and %s, list %s", ida, idb, list.body)
	}
}
