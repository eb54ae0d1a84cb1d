package webui_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// readable strips the markup off a page, leaving its text with its
// spaces folded: what a person reads.
func readable(page string) string {
	text := strings.Join(strings.Fields(tags.ReplaceAllString(page, " ")), " ")
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
