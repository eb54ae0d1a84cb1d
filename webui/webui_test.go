package webui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/webui"
)

// TestSignInCookieFlags: a known token becomes a session whose cookie is
// HttpOnly, SameSite=Strict, under the prefix only, Secure when served
// over TLS, and 256 random bits; an unknown token is refused, and comes
// back in no page.
func TestSignInCookieFlags(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{false, true} {
		fx := newFixture(t, func(o *webui.Options) { o.Secure = secure })
		c := fx.anonymous(t)
		if r := c.signIn("tok_wrong-guess", ""); r.status != http.StatusUnauthorized || strings.Contains(r.body, "tok_wrong-guess") {
			t.Fatalf("unknown token: %d, echoed: %t", r.status, strings.Contains(r.body, "tok_wrong-guess"))
		}
		r := c.signIn(fx.tokens["alice"], "")
		if r.status != http.StatusSeeOther || r.header.Get("Location") != "/ui/" {
			t.Fatalf("sign in: %d to %q", r.status, r.header.Get("Location"))
		}
		cookie := sessionCookie(t, r.header)
		if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/ui/" || cookie.Secure != secure {
			t.Errorf("secure=%t: cookie flags %+v", secure, cookie)
		}
		if len(cookie.Value) != 43 || cookie.MaxAge != int((8*time.Hour).Seconds()) {
			t.Errorf("session id %d characters, max-age %d: want 256 bits (43) and 8h", len(cookie.Value), cookie.MaxAge)
		}
		fx.checkNoToken(t)
	}
}

func sessionCookie(t *testing.T, h http.Header) *http.Cookie {
	t.Helper()
	for _, line := range h.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err == nil && c.Name == "idemgate_ui" {
			return c
		}
	}
	t.Fatalf("no session cookie in %q", h.Values("Set-Cookie"))
	return nil
}

// TestSessionsExpire: a session ends once idle too long, once its
// lifetime is over however busy, and at sign-out; an ended session's
// cookie opens nothing.
func TestSessionsExpire(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	fx := newFixture(t, func(o *webui.Options) {
		o.Now, o.SessionTTL, o.SessionIdle = clock, time.Hour, 10*time.Minute
	})
	signedOut := func(c *client) bool {
		r := c.get("/ui/operations")
		return r.status == http.StatusSeeOther && strings.HasPrefix(r.header.Get("Location"), "/ui/signin")
	}

	idle := fx.signIn(t, "bot")
	advance(11 * time.Minute)
	if !signedOut(idle) {
		t.Error("a session idle for 11 minutes is still open (idle limit 10m)")
	}

	busy := fx.signIn(t, "bot")
	for range 14 {
		advance(5 * time.Minute)
		if signedOut(busy) {
			break
		}
	}
	if !signedOut(busy) {
		t.Error("a session used every 5 minutes outlived its 1h lifetime")
	}

	out := fx.signIn(t, "bot")
	if r := out.post("/ui/signout", url.Values{"csrf": {out.csrf}}); r.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", r.status)
	}
	if !signedOut(out) {
		t.Error("the session is still open after sign-out")
	}
}

// TestFormsNeedTokenAndOrigin: a decision posted without the session's
// CSRF token, with another session's, or from another origin (by Origin or
// Sec-Fetch-Site) is 403 and decides nothing; the same form from the page
// itself decides.
func TestFormsNeedTokenAndOrigin(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	a := fx.deploy("bot", "dep-csrf", prod)
	alice, other := fx.signIn(t, "alice"), fx.signIn(t, "dana")
	path := "/ui/approvals/" + a.ID + "/decide"
	form := alice.decision("approve", a.Fingerprint)
	noToken := alice.decision("approve", a.Fingerprint)
	noToken.Del("csrf")
	wrongToken := alice.decision("approve", a.Fingerprint)
	wrongToken.Set("csrf", other.csrf)
	for name, try := range map[string]reply{
		"no token":               alice.post(path, noToken),
		"another session's":      alice.post(path, wrongToken),
		"another origin":         alice.post(path, form, "Origin", "http://evil.example"),
		"a cross-site fetch":     alice.post(path, form, "Sec-Fetch-Site", "cross-site"),
		"a same-site other port": alice.post(path, form, "Sec-Fetch-Site", "same-site"),
		"no session":             fx.anonymous(t).post(path, form),
	} {
		if try.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, try.status)
		}
	}
	if got := fx.approval(a.ID).Status; got != ledger.ApprovalPending {
		t.Fatalf("after refused posts the approval is %s", got)
	}
	if r := alice.post(path, form, "Origin", fx.srv.URL); r.status != http.StatusSeeOther {
		t.Fatalf("the page's own form: %d %s", r.status, r.body)
	}
	if got := fx.approval(a.ID).Status; got != ledger.ApprovalApproved {
		t.Fatalf("after the decision the approval is %s", got)
	}
}

// TestHeadersOnEveryPage: each page forbids framing, inline script and
// referrers, and is never cached.
func TestHeadersOnEveryPage(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	a := fx.deploy("bot", "dep-headers", prod)
	c := fx.signIn(t, "alice")
	for _, path := range []string{"/ui/signin", "/ui/inbox", "/ui/approvals/" + a.ID, "/ui/operations",
		"/ui/operations/" + a.OpID, "/ui/dashboard", "/ui/nowhere", "/ui/static/ui.css"} {
		r := c.get(path)
		h := r.header
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") ||
			strings.Contains(csp, "unsafe-inline") || h.Get("X-Frame-Options") != "DENY" ||
			h.Get("Referrer-Policy") != "no-referrer" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s (%d): headers %v", path, r.status, h)
		}
		if strings.Contains(r.body, "<script>") || strings.Contains(r.body, " style=") {
			t.Errorf("%s: inline script or style in the page", path)
		}
	}
}

// TestOtherTenantIsNotFound: a session of globex gets 404, not 403, for
// acme's operation, approval, and decision, and sees none of acme's
// approvals in its inbox.
func TestOtherTenantIsNotFound(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	a := fx.deploy("bot", "dep-tenant", prod)
	gina := fx.signIn(t, "gina")
	for _, r := range []reply{gina.get("/ui/operations/" + a.OpID), gina.get("/ui/approvals/" + a.ID),
		gina.post("/ui/approvals/"+a.ID+"/decide", gina.decision("approve", a.Fingerprint)),
		gina.post("/ui/operations/"+a.OpID+"/resolve", url.Values{"csrf": {gina.csrf}, "state": {"failed"}, "note": {"x"}})} {
		if r.status != http.StatusNotFound || strings.Contains(r.body, a.Fingerprint) {
			t.Errorf("another tenant's record: %d", r.status)
		}
	}
	if r := gina.get("/ui/inbox"); strings.Contains(r.body, a.ID) || strings.Contains(r.body, "api@sha256") {
		t.Error("globex's inbox shows acme's approval")
	}
	if r := gina.get("/ui/operations"); strings.Contains(r.body, a.OpID) {
		t.Error("globex's explorer lists acme's operation")
	}
	if got := fx.approval(a.ID).Status; got != ledger.ApprovalPending {
		t.Fatalf("acme's approval is %s", got)
	}
}

// TestRolesDecideWhatShows: an agent sees operations but not the inbox,
// and may not resolve.
func TestRolesDecideWhatShows(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	bot := fx.signIn(t, "bot")
	if r := bot.get("/ui/"); r.header.Get("Location") != "/ui/operations" {
		t.Errorf("an agent's start page: %q", r.header.Get("Location"))
	}
	if r := bot.get("/ui/inbox"); r.status != http.StatusForbidden {
		t.Errorf("an agent's inbox: %d", r.status)
	}
	if r := bot.get("/ui/operations"); r.status != http.StatusOK || strings.Contains(r.body, `href="/ui/inbox"`) {
		t.Errorf("an agent's explorer: %d, with an inbox link", r.status)
	}
	op := fx.unknownCapture("cap-roles")
	if r := bot.post("/ui/operations/"+op.ID+"/resolve", url.Values{"csrf": {bot.csrf}, "state": {"succeeded"},
		"note": {"seen"}}); r.status != http.StatusForbidden {
		t.Errorf("an agent's resolve: %d", r.status)
	}
	if got := fx.operation(op.ID).State; got != ledger.Unknown {
		t.Errorf("the capture is %s", got)
	}
	if r := fx.signIn(t, "alice").get("/ui/"); r.header.Get("Location") != "/ui/inbox" {
		t.Errorf("an approver's start page: %q", r.header.Get("Location"))
	}
}

// unknownCapture makes a capture whose outcome is unknown, through the API.
func (fx *fixture) unknownCapture(key string) *ledger.Operation {
	fx.t.Helper()
	r := fx.call("bot", "POST", "/v1/payment-intents/pi_7/capture", key, `{"amount":4200,"currency":"EUR"}`)
	op, err := fx.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
		Key: key})
	if err != nil || op.State != ledger.Unknown {
		fx.t.Fatalf("capture: %d %s, operation %v %v", r.status, r.body, op, err)
	}
	return op
}

// TestSignInReturnsOnlyHere: the page to return to after sign-in is one
// of the page's own, never another site.
func TestSignInReturnsOnlyHere(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	for next, want := range map[string]string{"/ui/operations?state=unknown": "/ui/operations?state=unknown",
		"//evil.example/ui/": "/ui/", "https://evil.example/ui/": "/ui/", "/elsewhere": "/ui/", `/ui/\evil`: "/ui/"} {
		r := fx.anonymous(t).signIn(fx.tokens["bot"], next)
		if got := r.header.Get("Location"); got != want {
			t.Errorf("next %q: sent to %q, want %q", next, got, want)
		}
	}
}

// TestDecisionEchoesFingerprint: a decision whose form carries another
// request's fingerprint is refused by the store (409) and decides nothing;
// the requests waiting on the operation are woken by the one decision.
func TestDecisionEchoesFingerprint(t *testing.T) {
	t.Parallel()
	var woken []string
	fx := newFixture(t, func(o *webui.Options) { o.Operator.Wake = func(opID string) { woken = append(woken, opID) } })
	a := fx.deploy("bot", "dep-echo", prod)
	alice := fx.signIn(t, "alice")
	other := "sha256:" + strings.Repeat("0", 64)
	if r := alice.post("/ui/approvals/"+a.ID+"/confirm", alice.decision("approve", other)); !strings.Contains(r.body,
		"This is not the fingerprint of the request that waits") {
		t.Errorf("the confirmation does not warn of another fingerprint: %d", r.status)
	}
	if r := alice.post("/ui/approvals/"+a.ID+"/decide", alice.decision("approve", other)); r.status != http.StatusConflict ||
		!strings.Contains(r.body, "the request changed") {
		t.Errorf("a decision for another fingerprint: %d %s", r.status, r.body)
	}
	if got := fx.approval(a.ID).Status; got != ledger.ApprovalPending {
		t.Fatalf("the approval is %s", got)
	}
	if r := alice.post("/ui/approvals/"+a.ID+"/decide", alice.decision("deny", a.Fingerprint)); r.status != http.StatusSeeOther {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	if got := fx.operation(a.OpID).State; got != ledger.Failed {
		t.Fatalf("after a denial the operation is %s", got)
	}
	if fmt.Sprint(woken) != "["+a.OpID+"]" {
		t.Errorf("the waiting requests were woken for %v, want the one denial of %s", woken, a.OpID)
	}
}

// TestResolveChecksItsForm: a resolution needs a final or prepared state
// and a note; an answer goes only with a final state; a resolution without
// an answer is kept as such.
func TestResolveChecksItsForm(t *testing.T) {
	t.Parallel()
	type heard struct {
		before, after ledger.State
		duplicate     bool
	}
	var got []heard
	fx := newFixture(t, func(o *webui.Options) {
		o.Operator.Resolved = func(before, after *ledger.Operation, dup bool) {
			got = append(got, heard{before.State, after.State, dup})
		}
	})
	op := fx.unknownCapture("cap-form")
	alice := fx.signIn(t, "alice")
	path := "/ui/operations/" + op.ID + "/resolve"
	for name, form := range map[string]url.Values{
		"no note":             {"state": {"succeeded"}},
		"executing":           {"state": {"executing"}, "note": {"x"}},
		"an answer, prepared": {"state": {"prepared"}, "note": {"x"}, "status": {"200"}},
		"a status of 99":      {"state": {"succeeded"}, "note": {"x"}, "status": {"99"}},
	} {
		form.Set("csrf", alice.csrf)
		// The control API's status for the same refusal: one error map.
		if r := alice.post(path, form); r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d, want 422", name, r.status)
		}
	}
	if got := fx.operation(op.ID).State; got != ledger.Unknown {
		t.Fatalf("after refused forms the capture is %s", got)
	}
	form := url.Values{"csrf": {alice.csrf}, "state": {"prepared"}, "note": {"the bank never saw it"}}
	if r := alice.post(path, form); r.status != http.StatusSeeOther {
		t.Fatalf("resolve to prepared: %d %s", r.status, r.body)
	}
	if got := fx.operation(op.ID); got.State != ledger.Prepared || got.Response != nil {
		t.Fatalf("resolved to %s with answer %v", got.State, got.Response)
	}
	if r := alice.post(path, form); r.status != http.StatusConflict {
		t.Errorf("resolving a prepared operation: %d, want 409", r.status)
	}

	twice := fx.unknownCapture("cap-twice")
	form = url.Values{"csrf": {alice.csrf}, "state": {"succeeded"}, "note": {"charged twice"}, "duplicate": {"1"}}
	if r := alice.post("/ui/operations/"+twice.ID+"/resolve", form); r.status != http.StatusSeeOther {
		t.Fatalf("resolve as a duplicate: %d %s", r.status, r.body)
	}
	h, err := fx.store.History(context.Background(), twice.ID)
	if err != nil || h[len(h)-1].Reason != "duplicate: charged twice" || h[len(h)-1].Actor != "alice" {
		t.Fatalf("history of the duplicate: %+v %v", h, err)
	}
	want := []heard{{ledger.Unknown, ledger.Prepared, false}, {ledger.Unknown, ledger.Succeeded, true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the hook heard %v, want %v", got, want)
	}
}

// TestResolveAnActionWithItsResult: an action's unknown operation offers a
// result, not an answer; the result is checked as the control API checks
// it (not JSON: 422, nothing changed) and then kept for the replays.
func TestResolveAnActionWithItsResult(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	c := context.Background()
	r, err := fx.store.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindAction,
		Tenant: "acme", Key: "mail-1", Route: contract.ActionRoute("mail.send"),
		Fingerprint: "sha256:bb", Lease: time.Hour, Retention: time.Hour, Actor: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.store.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "owner_unknown"}); err != nil {
		t.Fatal(err)
	}
	alice := fx.signIn(t, "alice")
	page := alice.get("/ui/operations/" + r.Op.ID)
	if !strings.Contains(page.body, `name="result"`) || strings.Contains(page.body, `name="status"`) {
		t.Fatalf("the resolve form of an action: %s", page.body)
	}
	path := "/ui/operations/" + r.Op.ID + "/resolve"
	bad := url.Values{"csrf": {alice.csrf}, "state": {"succeeded"}, "note": {"x"}, "result": {`{"id":`}}
	if got := alice.post(path, bad); got.status != http.StatusUnprocessableEntity {
		t.Fatalf("a result that is not JSON: %d", got.status)
	}
	if got := fx.operation(r.Op.ID); got.State != ledger.Unknown {
		t.Fatalf("a refused form changed the operation to %s", got.State)
	}
	good := url.Values{"csrf": {alice.csrf}, "state": {"succeeded"}, "note": {"in the SMTP log"}, "result": {`{"id": "m-1"}`}}
	if got := alice.post(path, good); got.status != http.StatusSeeOther {
		t.Fatalf("resolve with a result: %d %s", got.status, got.body)
	}
	if got := fx.operation(r.Op.ID); got.State != ledger.Succeeded || string(contract.ResultOf(got)) != `{"id":"m-1"}` {
		t.Fatalf("resolved: %s %s", got.State, contract.ResultOf(got))
	}
}

// TestApprovalShowsItsHeaders: the approval page shows the headers the
// approved run will send (issue 24, 7.7), as the approver decides on them.
func TestApprovalShowsItsHeaders(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	a := fx.pending(fx.call("bot", "POST", "/v1/services/api/deployments", "dep-headers", prod,
		"X-Target-Cluster", "eu-1"))
	if got := http.Header(a.Headers).Get("X-Target-Cluster"); got != "eu-1" {
		t.Fatalf("the approval keeps headers %v", a.Headers)
	}
	page := fx.signIn(t, "alice").get("/ui/approvals/" + a.ID)
	if !strings.Contains(page.body, "Headers sent") || !strings.Contains(page.body, "X-Target-Cluster: eu-1") ||
		strings.Contains(page.body, fx.tokens["bot"]) {
		t.Fatalf("the approval page: %s", page.body)
	}
}

// TestEachUIKeepsItsOwnClock: the pages are parsed once per process and
// each UI binds its own functions to its copy; two UIs in one process,
// with clocks two days apart, each say how long ago an operation was made
// by their own clock, never by the other's.
func TestEachUIKeepsItsOwnClock(t *testing.T) {
	t.Parallel()
	start := time.Now()
	pages := map[string]string{}
	for want, ahead := range map[string]time.Duration{"2d 2h ago": 50*time.Hour + 30*time.Minute,
		"4d 4h ago": 100*time.Hour + 30*time.Minute} {
		fx := newFixture(t, func(o *webui.Options) { o.Now = func() time.Time { return start.Add(ahead) } })
		fx.deploy("bot", "dep-clock", prod)
		r := fx.signIn(t, "alice").get("/ui/operations")
		if r.status != http.StatusOK {
			t.Fatalf("operations: %d", r.status)
		}
		pages[want] = r.body
	}
	for want, body := range pages {
		for other := range pages {
			if has := strings.Contains(body, other); has != (other == want) {
				t.Errorf("the UI whose clock says %q: shows %q is %v", want, other, has)
			}
		}
	}
}
