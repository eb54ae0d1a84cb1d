package webui_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// readable strips the markup off a page, leaving its text with its
// spaces folded: what a person reads.
func readable(page string) string {
	text := strings.Join(strings.Fields(html.UnescapeString(tags.ReplaceAllString(page, " "))), " ")
	return beforeStop.ReplaceAllString(text, "$1")
}

var (
	tags       = regexp.MustCompile(`<[^>]*>`)
	beforeStop = regexp.MustCompile(` ([,.;:])`)
)

// timelineEntry is the text of the page's timeline entry of kind.
func timelineEntry(t *testing.T, page, kind string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<li class="event[^"]*" data-kind="` + kind + `">(.*?)</li>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no %s event on the timeline", kind)
	}
	return readable(m[1])
}

// TestOperationSaysWhoAskedAndWhoDecided: bot asks for a deployment in
// one run, alice approves it, and bot's retry in another run executes
// it. The operation's page names both runs for what each did, and its
// timeline says in words who decided and who asked.
func TestOperationSaysWhoAskedAndWhoDecided(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	r := fx.call("bot", "POST", "/v1/services/api/deployments", "dep-runs", prod, "Idempotency-Run", "run-ask")
	a := fx.pending(r)
	alice := fx.signIn(t, "alice")
	if r := alice.post("/ui/approvals/"+a.ID+"/decide", alice.decision("approve", a.Fingerprint)); r.status != http.StatusSeeOther {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if r := fx.call("bot", "POST", "/v1/services/api/deployments", "dep-runs", prod, "Idempotency-Run", "run-exec"); r.status != http.StatusCreated {
		t.Fatalf("the retry after the approval: %d %s", r.status, r.body)
	}
	page := alice.get("/ui/operations/" + a.OpID).body
	contains(t, "the operation's facts", readable(page), "Requested by bot, asked in run run-ask · executed in run run-exec")
	contains(t, "the approval's event", timelineEntry(t, page, "approved"), "alice decided: approved", "bot asked, in run run-ask")
	contains(t, "the request's event", timelineEntry(t, page, "approval_requested"), "bot asked, in run run-ask")
}

// TestLockedNamesWhoWasRefused: while a release to production waits for
// its approval, another release to production is refused (409,
// concurrency_locked); the holder's timeline says that another request
// was refused, and whose, not that the holder was locked.
func TestLockedNamesWhoWasRefused(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	holder := fx.pending(fx.call("bot", "POST", "/v1/releases", "rel-1", `{"environment":"production","v":1}`))
	if r := fx.call("dana", "POST", "/v1/releases", "rel-2", `{"environment":"production","v":2}`, "Idempotency-Run", "run-d"); r.status != http.StatusConflict {
		t.Fatalf("a second release to production: %d %s", r.status, r.body)
	}
	page := fx.signIn(t, "alice").get("/ui/operations/" + holder.OpID).body
	got := timelineEntry(t, page, "locked")
	contains(t, "the locked event", got, "another request refused", "dana asked, in run run-d, under key rel-2",
		"this operation holds its concurrency group")
	if strings.Contains(got, "principal dana") {
		t.Errorf("the locked event still reads as the holder's: %s", got)
	}
}

// TestASucceededOperationsErrorIsHistory: a capture whose connection
// was reset is unknown with last error upstream_reset; once an operator
// settles it as succeeded, its page no longer shows that error as its
// state, only as what happened before.
func TestASucceededOperationsErrorIsHistory(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	r := fx.reserve("cap-reset", "/v1/payment-intents/{id}/capture", time.Hour)
	if _, err := fx.store.MarkUnknown(context.Background(), *r.Lease, ledger.Note{Reason: "connection reset", ErrorCode: "upstream_reset"}); err != nil {
		t.Fatal(err)
	}
	alice := fx.signIn(t, "alice")
	path := "/ui/operations/" + r.Op.ID
	if got := readable(alice.get(path).body); !strings.Contains(got, "Last error upstream_reset") {
		t.Fatalf("an unknown operation's page does not show its last error: %s", got)
	}
	form := url.Values{"csrf": {alice.csrf}, "state": {"succeeded"}, "note": {"the bank shows it"}}
	if got := alice.post(path+"/resolve", form); got.status != http.StatusSeeOther {
		t.Fatalf("resolve: %d %s", got.status, got.body)
	}
	got := readable(alice.get(path).body)
	if strings.Contains(got, "Last error") {
		t.Errorf("a succeeded operation shows a last error as its state: %s", got)
	}
	contains(t, "the settled operation", got, "Before it succeeded upstream_reset (an error met on the way")
}

// TestAnUnknownOperationShowsWhatWasSent: the person who resolves an
// unknown operation must find its record at the upstream. A capture's
// page shows its target, its path parameters, the probe that finds it,
// the run to look for in the agent's log, and how to check a body
// against its fingerprint: the store keeps no body, and the page says so.
// A refund that was approved shows the command the approver saw, whole.
func TestAnUnknownOperationShowsWhatWasSent(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	capture := fx.unknownCapture("cap-sent")
	alice := fx.signIn(t, "alice")
	got := readable(alice.get("/ui/operations/" + capture.ID).body)
	contains(t, "an unknown capture", got, "What was sent", "POST /v1/payment-intents/pi_7/capture",
		"id pi_7", "GET /v1/payment-intents/pi_7", "does not keep request bodies",
		"idemgate fingerprint --method POST --route '/v1/payment-intents/{id}/capture' --tenant acme --param id=pi_7",
		capture.Fingerprint)

	a := fx.refund("bot", "ref-sent", `{"order":"o-7","amount_minor":4999900,"currency":"EUR"}`)
	if r := alice.post("/ui/approvals/"+a.ID+"/decide", alice.decision("approve", a.Fingerprint)); r.status != http.StatusSeeOther {
		t.Fatalf("approve: %d", r.status)
	}
	if r := fx.call("bot", "POST", "/v1/refunds", "ref-sent", `{"order":"o-7","amount_minor":4999900,"currency":"EUR"}`); r.status < 500 {
		t.Fatalf("the refund's upstream should have failed: %d %s", r.status, r.body)
	}
	if op := fx.operation(a.OpID); op.State != ledger.Unknown {
		t.Fatalf("the refund is %s", op.State)
	}
	got = readable(alice.get("/ui/operations/" + a.OpID).body)
	contains(t, "an unknown refund", got, "What was sent", "the command the approver approved", `/amount_minor 4999900`,
		`/order "o-7"`)
}

// TestAmountsInMinorUnitsAreFormatted: the refunds route's schema marks
// amount_minor as minor units of the currency in /currency; the inbox
// and the approval show 4999900 as 49,999.00 EUR beside the raw value.
func TestAmountsInMinorUnitsAreFormatted(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	a := fx.refund("bot", "ref-amount", `{"order":"o-9","amount_minor":4999900,"currency":"EUR"}`)
	alice := fx.signIn(t, "alice")
	for _, path := range []string{"/ui/inbox", "/ui/approvals/" + a.ID} {
		contains(t, path, readable(alice.get(path).body), "/amount_minor 4999900 = 49,999.00 EUR", `/currency "EUR"`)
	}
}
