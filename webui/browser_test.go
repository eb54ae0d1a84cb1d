package webui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/webui"
)

// TestBrowser drives the page in a real headless Chromium, one browser
// for every subtest and a browser context (its own cookies) for each
// person, over the middleware and a real SQLite store on a real socket.
// Last, no principal's token is in any page, URL or log line.
func TestBrowser(t *testing.T) {
	browser := newBrowser(t)
	fx := newFixture(t, func(o *webui.Options) { o.Series = series{now: time.Now()} })
	t.Run("approve a production deployment, which then runs once", func(t *testing.T) { approveDeploy(t, fx, browser) })
	t.Run("the requester's approve is refused", func(t *testing.T) { requesterRefused(t, fx, browser) })
	t.Run("an admin resolves an unknown capture", func(t *testing.T) { resolveCapture(t, fx, browser) })
	t.Run("an approver cannot see another tenant's inbox", func(t *testing.T) { otherTenant(t, fx, browser) })
	t.Run("command fields appear as text", func(t *testing.T) { markupIsText(t, fx, browser) })
	t.Run("a cross-site form is refused", func(t *testing.T) { crossSite(t, fx, browser) })
	t.Run("cookie flags and sign-out", func(t *testing.T) { cookieAndSignOut(t, fx, browser) })
	t.Run("dashboard", func(t *testing.T) { dashboard(t, fx, browser) })
	t.Run("expiry in UTC and in the viewer's zone", func(t *testing.T) { expiryInTwoZones(t, fx, browser) })
	t.Run("the token appears in no page, URL or log", fx.checkNoToken)
}

// approveDeploy: alice sees the pending production deployment with its
// fingerprint, approves it with the keyboard through the confirmation
// that repeats the fingerprint; the agent's retry deploys once (counted
// at the upstream), later ones replay, and the timeline shows requested,
// approved, forwarded and succeeded, each proven in the audit log.
func approveDeploy(t *testing.T, fx *fixture, browser context.Context) {
	a := fx.deploy("bot", "dep-prod-1", prod)
	ctx := fx.browse(t, browser, "alice")
	do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/inbox"), chromedp.WaitVisible(chromedp.ID("approval-"+a.ID)))
	contains(t, "inbox", text(t, ctx, "#approval-"+a.ID), a.Fingerprint, "Deploy api@sha256:4f2a9c to production (api)",
		"POST /v1/services/api/deployments", "not reversible", a.OpID, "dep-prod-1", "bot", "left",
		`/artifact`, `"api@sha256:4f2a9c"`)
	checkLabels(t, ctx)
	screenshot(t, ctx, "ui-inbox")

	do(t, ctx, chromedp.Click(chromedp.CSS("#approval-"+a.ID+" a.button")), chromedp.WaitVisible(chromedp.ID("decide-form")),
		chromedp.SendKeys(chromedp.ID("note"), "digest checked against the release"))
	checkLabels(t, ctx)
	// By keyboard: focus the button and press Enter; on the confirmation
	// the confirming button has the focus already.
	do(t, ctx, chromedp.Focus(chromedp.ID("approve")), chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.ID("confirm-fingerprint")))
	if got := text(t, ctx, "#confirm-fingerprint"); got != a.Fingerprint {
		t.Fatalf("the confirmation repeats %q, want %q", got, a.Fingerprint)
	}
	if got := eval[string](t, ctx, "document.activeElement.id"); got != "confirm" {
		t.Errorf("the focus is on %q, want the confirming button", got)
	}
	do(t, ctx, chromedp.KeyEvent("\r"), chromedp.WaitVisible(chromedp.CSS(".notice")))
	contains(t, "after the decision", text(t, ctx, "main"), "Approved.", "alice", "digest checked against the release")
	if got := fx.approval(a.ID); got.Status != ledger.ApprovalApproved || got.DecidedBy != "alice" {
		t.Fatalf("the store has the approval %s by %q", got.Status, got.DecidedBy)
	}
	runsOnce(t, fx, ctx, a)
}

// runsOnce: after the approval the agent's retry deploys once, later ones
// replay, and the operation's timeline tells the story, proven.
func runsOnce(t *testing.T, fx *fixture, ctx context.Context, a *ledger.Approval) {
	for i := range 2 {
		r := fx.call("bot", "POST", "/v1/services/api/deployments", "dep-prod-1", prod)
		if r.status != http.StatusCreated || r.body != `{"deployment":"D-1"}` {
			t.Fatalf("retry %d after the approval: %d %s", i, r.status, r.body)
		}
	}
	if n := fx.deploys.Load(); n != 1 {
		t.Fatalf("the upstream deployed %d times, want once", n)
	}

	fx.seal()
	do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/operations/"+a.OpID), chromedp.WaitVisible(chromedp.ID("timeline")))
	kinds := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline li")].map(e => e.dataset.kind)`)
	if !inOrder(kinds, "approval_requested", "approved", "forwarded", "succeeded") {
		t.Errorf("timeline %v: want approval_requested, approved, forwarded, succeeded in order", kinds)
	}
	proofs := eval[[]string](t, ctx, `[...document.querySelectorAll("#timeline .proof")].map(e => e.innerText)`)
	if len(proofs) != len(kinds) || len(kinds) < 4 {
		t.Fatalf("%d proofs for %d events", len(proofs), len(kinds))
	}
	for i, p := range proofs {
		if !strings.HasPrefix(p, "proven") {
			t.Errorf("event %d (%s): proof %q, want proven", i, kinds[i], p)
		}
	}
	contains(t, "operation page", text(t, ctx, "main"), "succeeded", "D-1", a.ID, "digest checked against the release")
	screenshot(t, ctx, "ui-operation")
}

// inOrder reports whether want appear in got in this order.
func inOrder(got []string, want ...string) bool {
	for _, g := range got {
		if len(want) > 0 && g == want[0] {
			want = want[1:]
		}
	}
	return len(want) == 0
}

// requesterRefused: dana, an approver, requested this deployment. Her
// page disables the decision and says why; forced through, the
// confirmation says it again, and forced once more, the store's refusal
// is shown and nothing is decided.
func requesterRefused(t *testing.T, fx *fixture, browser context.Context) {
	a := fx.deploy("dana", "dep-dana-1", `{"artifact":"web@sha256:77aa","environment":"production"}`)
	ctx := fx.browse(t, browser, "dana")
	do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/approvals/"+a.ID), chromedp.WaitVisible(chromedp.ID("why-not")))
	contains(t, "why not", text(t, ctx, "#why-not"), "You requested this operation")
	if !eval[bool](t, ctx, `document.getElementById("approve").disabled && document.getElementById("deny").disabled`) {
		t.Fatal("the requester's approve button is enabled")
	}
	enable := chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("[disabled]").forEach(e => e.disabled = false)`)
	do(t, ctx, enable, chromedp.Click(chromedp.ID("approve")), chromedp.WaitVisible(chromedp.ID("confirm-fingerprint")))
	contains(t, "confirmation", text(t, ctx, "#why-not"), "You requested this operation")
	do(t, ctx, enable, chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("problem")))
	contains(t, "refusal", text(t, ctx, "main"), "Refused: you may not decide this",
		"dana requested this operation and cannot decide it")
	if got := fx.approval(a.ID).Status; got != ledger.ApprovalPending {
		t.Fatalf("the requester's own approval is %s", got)
	}
}

// resolveCapture: a capture's answer is lost (unknown); alice finds it
// marked stuck in the explorer, resolves it with a note and the
// upstream's answer, and the agent's retry gets that answer, byte for
// byte, with no second capture.
func resolveCapture(t *testing.T, fx *fixture, browser context.Context) {
	op := fx.unknownCapture("cap-lost-1")
	if r := fx.call("bot", "POST", "/v1/payment-intents/pi_7/capture", "cap-lost-1", `{"amount":4200,"currency":"EUR"}`); r.status != http.StatusConflict {
		t.Fatalf("retry of an unknown capture: %d %s", r.status, r.body)
	}
	ctx := fx.browse(t, browser, "alice")
	do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/operations?state=unknown&stuck=1"), chromedp.WaitVisible(chromedp.ID("ops")))
	checkLabels(t, ctx)
	contains(t, "explorer", text(t, ctx, "#ops"), op.ID, "outcome unknown")
	const answer = `{"id":"ch_1","status":"captured"}`
	do(t, ctx, chromedp.Click(chromedp.CSS(`a[href="/ui/operations/`+op.ID+`"]`)), chromedp.WaitVisible(chromedp.ID("resolve-form")))
	checkLabels(t, ctx)
	do(t, ctx, chromedp.Click(chromedp.ID("to-succeeded")),
		chromedp.SendKeys(chromedp.ID("r-note"), "the bank's statement shows the capture"),
		chromedp.SendKeys(chromedp.ID("r-ref"), "ch_1"), chromedp.SendKeys(chromedp.ID("r-status"), "200"),
		chromedp.SetValue(chromedp.ID("r-body"), answer),
		chromedp.Click(chromedp.ID("resolve")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	if got := fx.operation(op.ID); got.State != ledger.Succeeded || got.ResultRef != "ch_1" {
		t.Fatalf("resolved operation: %s, reference %q", got.State, got.ResultRef)
	}
	r := fx.call("bot", "POST", "/v1/payment-intents/pi_7/capture", "cap-lost-1", `{"amount":4200,"currency":"EUR"}`)
	if r.status != http.StatusOK || r.body != answer || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("the agent's retry after the resolution: %d %q %q", r.status, r.body, r.header.Get("Content-Type"))
	}
	if n := fx.charges.Load(); n != 1 {
		t.Fatalf("the upstream was asked to capture %d times, want once", n)
	}
	contains(t, "timeline", text(t, ctx, "#timeline"), "resolved", "alice", "the bank's statement shows the capture")
}

// otherTenant: gina approves for globex; acme's pending approval is not
// in her inbox, and acme's pages are 404 to her.
func otherTenant(t *testing.T, fx *fixture, browser context.Context) {
	a := fx.deploy("bot", "dep-acme-2", prod)
	ctx := fx.browse(t, browser, "gina")
	do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/inbox"), chromedp.WaitVisible(chromedp.ID("inbox-empty")))
	if body := text(t, ctx, "main"); strings.Contains(body, a.ID) || strings.Contains(body, a.Fingerprint) {
		t.Fatal("globex's inbox shows acme's approval")
	}
	for _, path := range []string{"/ui/operations/" + a.OpID, "/ui/approvals/" + a.ID} {
		resp := run(t, ctx, chromedp.NavigateResponse(fx.srv.URL+path))
		if resp.Status != http.StatusNotFound {
			t.Errorf("%s for another tenant: %d, want 404", path, resp.Status)
		}
	}
}

// markupIsText: command fields holding markup are shown as text; no
// element is made of them and no script of theirs runs.
func markupIsText(t *testing.T, fx *fixture, browser context.Context) {
	a := fx.deploy("bot", "dep-xss-1", `{"artifact":"<script>window.__xss=1</script>","environment":"production",`+
		`"note":"\"><img src=x onerror=\"window.__xss=2\">"}`)
	ctx := fx.browse(t, browser, "alice")
	for _, path := range []string{"/ui/inbox", "/ui/approvals/" + a.ID, "/ui/operations/" + a.OpID} {
		do(t, ctx, chromedp.Navigate(fx.srv.URL+path), chromedp.WaitVisible(chromedp.CSS("main")))
		contains(t, path, text(t, ctx, "main"), "<script>window.__xss=1</script>")
		if path != "/ui/operations/"+a.OpID {
			contains(t, path, text(t, ctx, "main"), `<img src=x onerror=`)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll("main script, img, [onerror]").length`); n != 0 {
			t.Errorf("%s: %d elements made of a command's markup", path, n)
		}
		if got := eval[string](t, ctx, "typeof window.__xss"); got != "undefined" {
			t.Errorf("%s: the command's script ran", path)
		}
	}
}

// crossSite: a page on another origin, same site (another port) or
// another site, posts alice's decision in her browser: refused, 403,
// nothing decided.
func crossSite(t *testing.T, fx *fixture, browser context.Context) {
	a := fx.deploy("bot", "dep-csrf-1", prod)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<form method="post" action="%s/ui/approvals/%s/decide"><input name="decision" value="approve">`+
			`<input name="fingerprint" value="%s"><button id="go">win a prize</button></form>`, fx.srv.URL, a.ID, a.Fingerprint)
	}))
	defer evil.Close()
	ctx := fx.browse(t, browser, "alice")
	for _, origin := range []string{evil.URL, strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)} {
		do(t, ctx, chromedp.Navigate(origin), chromedp.WaitVisible(chromedp.ID("go")))
		resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("go")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusForbidden {
			t.Errorf("a form from %s: %d, want 403", origin, resp.Status)
		}
	}
	if got := fx.approval(a.ID).Status; got != ledger.ApprovalPending {
		t.Fatalf("after cross-site posts the approval is %s", got)
	}
}

// cookieAndSignOut: the browser keeps the session cookie HttpOnly,
// SameSite=Strict, under /ui/ only, out of the page's scripts' reach;
// signing out ends the session.
func cookieAndSignOut(t *testing.T, fx *fixture, browser context.Context) {
	ctx := fx.browse(t, browser, "bot")
	got, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{fx.srv.URL + "/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(got.Cookies, func(c *network.Cookie) bool { return c.Name == "idemgate_ui" })
	if i < 0 {
		t.Fatalf("no session cookie among %d", len(got.Cookies))
	}
	c := got.Cookies[i]
	if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/ui/" || c.Secure {
		t.Errorf("session cookie: httponly %t samesite %s path %s secure %t", c.HTTPOnly, c.SameSite, c.Path, c.Secure)
	}
	if js := eval[string](t, ctx, "document.cookie"); strings.Contains(js, "idemgate_ui") {
		t.Error("the page's scripts can read the session cookie")
	}
	do(t, ctx, chromedp.Click(chromedp.CSS(`.who button`)), chromedp.WaitVisible(chromedp.ID("token")))
	contains(t, "signed out", text(t, ctx, "main"), "You are signed out.")
	do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/operations"), chromedp.WaitVisible(chromedp.ID("token")))
}

// dashboard: the indicators of the last hour as sparklines.
func dashboard(t *testing.T, fx *fixture, browser context.Context) {
	ctx := fx.browse(t, browser, "alice")
	do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/dashboard"), chromedp.WaitVisible(chromedp.ID("charts")))
	if n := eval[int](t, ctx, `[...document.querySelectorAll("#charts svg path.line")].filter(p => p.getTotalLength() > 100).length`); n != 10 {
		t.Errorf("%d lines drawn, want the ten indicators", n)
	}
	contains(t, "dashboard", text(t, ctx, "#charts"), "Operations created", "Unknown operations", "Manual resolutions")
	screenshot(t, ctx, "ui-dashboard")
}

// expiryInTwoZones: beside the countdown, the approval page says when it
// expires in UTC (from the server) and in the viewer's own zone (from
// the browser's clock), here Tokyo's.
func expiryInTwoZones(t *testing.T, fx *fixture, browser context.Context) {
	a := fx.deploy("bot", "dep-zones-1", prod)
	ctx := fx.browse(t, browser, "alice")
	if _, err := chromedp.Call(ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Tokyo"}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/approvals/"+a.ID), chromedp.WaitVisible(chromedp.ID("decide-form")))
	tokyo := time.FixedZone("JST", 9*3600)
	contains(t, "expiry", text(t, ctx, "main"), "left", a.ExpiresAt.UTC().Format("2006-01-02 15:04")+" UTC",
		a.ExpiresAt.In(tokyo).Format("2006-01-02 15:04")+" GMT+9")
}
