package webui_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/webui"
)

// view is one page of the web UI in one of its states, as a person
// reaches it: who looks, and the steps that bring the page up.
type view struct {
	name  string
	who   string // "" for a browser with no session
	steps func(fx *fixture) []chromedp.Action[chromedp.Void]
	// ink names elements whose text must be drawn in the page's own ink,
	// not in a button's or a warning's colours.
	ink []string
}

// TestEveryPageIsLegible opens every page of the web UI, in the states an
// approver or an operator meets, in a real Chromium, and reads what a
// person sees: every text's computed colour against the background
// composited under it (WCAG 2 AA, 4.5:1), the page drawn 390 pixels wide
// as on a phone (no sideways scroll), each fact said once, and no request
// of the page's own parts failing (the icon). It fails if any template is
// never opened, so that a new page cannot escape the checks. First it
// shows that the contrast check finds unreadable text at all.
func TestEveryPageIsLegible(t *testing.T) {
	browser := newBrowser(t)
	t.Run("the check finds unreadable text", func(t *testing.T) { contrastCheckWorks(t, browser) })
	fx := newFixture(t, func(o *webui.Options) {
		o.Series, o.NearExpiry = series{now: time.Now()}, 2*time.Hour // every pending approval "expires soon"
	})
	seen := map[string]bool{}
	failed := &failures{}
	people := fx.people(t, browser, failed)
	for _, v := range fx.views(t) {
		t.Run(v.name, func(t *testing.T) {
			ctx := people(v.who)
			failed.take()
			do(t, ctx, v.steps(fx)...)
			do(t, ctx, chromedp.Sleep(200*time.Millisecond)) // the icon is asked for after the load
			for _, f := range failed.take() {
				t.Errorf("the page's request for %s failed", f)
			}
			seen[eval[string](t, ctx, "document.body.dataset.page")] = true
			for _, bad := range eval[[]string](t, ctx, contrastJS) {
				t.Errorf("%s", bad)
			}
			phoneWidth(t, ctx)
			for _, bad := range eval[[]string](t, ctx, onceJS) {
				t.Errorf("a fact shown twice: %s", bad)
			}
			for _, sel := range v.ink {
				if eval[bool](t, ctx, `getComputedStyle(document.querySelector("`+sel+`")).color !== getComputedStyle(document.body).color`) {
					t.Errorf("%s is not drawn in the page's ink", sel)
				}
			}
		})
	}
	for _, name := range templates(t) {
		if !seen[name] {
			t.Errorf("the page %s.html is never opened by this test: add it to views", name)
		}
	}
}

// people returns a signed-in tab for each person ("" for a browser with
// no session), opened once and kept: a browser context costs seconds on a
// loaded machine. Every request of a tab's pages other than the page
// itself (a style sheet, a script, the icon) that fails is told to
// failed: each is an error in the browser's console.
func (fx *fixture) people(t *testing.T, browser context.Context, failed *failures) func(who string) context.Context {
	tabs := map[string]context.Context{}
	return func(who string) context.Context {
		if ctx, ok := tabs[who]; ok {
			return ctx
		}
		ctx, cancel := context.WithTimeout(browser, 5*time.Minute)
		ctx, cancelTab := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
		t.Cleanup(func() { cancelTab(); cancel() })
		if err := chromedp.Listen(ctx, failed.hear); err != nil {
			t.Fatal(err)
		}
		if who != "" {
			do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/signin"), chromedp.SendKeys(chromedp.ID("token"), fx.tokens[who]),
				chromedp.Click(chromedp.CSS(`button[type="submit"]`)), chromedp.WaitVisible(chromedp.ID("whoami")))
		}
		tabs[who] = ctx
		return ctx
	}
}

// onceJS lists the facts a page says twice: within one inbox card, or
// else within the page, a name given twice, a value given under two
// names, or a value that repeats the title.
const onceJS = `(() => {
  const bad = [], scopes = new Map();
  for (const dl of document.querySelectorAll("dl.facts")) {
    const scope = dl.closest("li.card") || document.querySelector("main");
    scopes.set(scope, (scopes.get(scope) || []).concat([dl]));
  }
  for (const [scope, dls] of scopes) {
    const titles = [...scope.querySelectorAll("h1,h2")].map(h => h.innerText.trim()).filter(t => t.length > 12);
    const names = new Set(), values = new Map();
    for (const dl of dls) for (const dt of dl.querySelectorAll("dt")) {
      const name = dt.innerText.trim(), value = (dt.nextElementSibling || dt).innerText.trim();
      if (names.has(name)) bad.push(name + " is given twice");
      names.add(name);
      if (value.length > 4 && values.has(value)) bad.push(name + " repeats " + values.get(value) + ": " + value);
      values.set(value, name);
      for (const title of titles) if (value.includes(title)) bad.push(name + " repeats the title: " + title);
    }
  }
  return bad;
})()`

// phoneWidth fails if the page, drawn 390 pixels wide as on a phone,
// scrolls sideways, naming the elements that stick out.
func phoneWidth(t *testing.T, ctx context.Context) {
	t.Helper()
	do(t, ctx, chromedp.EmulateViewport(390, 844))
	defer do(t, ctx, chromedp.ResetViewport())
	width := eval[int](t, ctx, "document.documentElement.scrollWidth")
	if width <= 390 {
		return
	}
	out := eval[[]string](t, ctx, `[...document.querySelectorAll("body *")]
		.filter(e => e.getBoundingClientRect().right > innerWidth + 0.5 && ![...e.children].some(c => c.getBoundingClientRect().right > innerWidth + 0.5))
		.slice(0, 6).map(e => "<" + e.tagName.toLowerCase() + (e.className ? "." + e.className : "") + "> to " + Math.round(e.getBoundingClientRect().right) + "px")`)
	t.Errorf("at 390 pixels wide the page is %d wide and scrolls sideways: %v", width, out)
}

// failures are the failed requests of the pages' own parts.
type failures struct {
	mu   sync.Mutex
	urls []string
}

func (f *failures) hear(ev any) {
	if r, ok := ev.(*network.EventResponseReceived); ok && r.Type != network.ResourceTypeDocument && r.Response.Status >= 400 {
		f.mu.Lock()
		f.urls = append(f.urls, fmt.Sprintf("%s (%d)", r.Response.URL, r.Response.Status))
		f.mu.Unlock()
	}
}

// take returns the failures heard so far, and forgets them.
func (f *failures) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.urls
	f.urls = nil
	return out
}

// templates lists the pages under templates/, the layout and its parts
// aside.
func templates(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("templates", "*.html"))
	if err != nil || len(files) == 0 {
		t.Fatalf("templates: %v %v", files, err)
	}
	var out []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".html")
		if name != "layout" && name != "parts" {
			out = append(out, name)
		}
	}
	return out
}

// views are the pages and their states: signed out, with a refusal, each
// page of an approver, an operator and an agent, both decisions'
// confirmations, the refusals, and the error pages.
func (fx *fixture) views(t *testing.T) []view {
	t.Helper()
	a := fx.deploy("bot", "dep-look-1", `{"artifact":"api@sha256:`+strings.Repeat("4f2a9c0b", 8)+`","environment":"production"}`)
	mine := fx.deploy("dana", "dep-look-2", `{"artifact":"web@sha256:77aa","environment":"production"}`)
	fx.deploy("bot", "dep-look-long", `{"artifact":"`+strings.Repeat("long-", 200)+`","environment":"production"}`)
	decided := fx.deploy("bot", "dep-look-3", `{"artifact":"api@sha256:99","environment":"production"}`)
	lost := fx.unknownCapture("cap-look-1")
	refund := fx.refund("bot", "ref-look-1", `{"order":"o-7","amount_minor":4999900,"currency":"EUR"}`)
	alice := fx.signIn(t, "alice")
	lostRefund := fx.refund("bot", "ref-look-2", `{"order":"o-8","amount_minor":1200,"currency":"EUR"}`)
	alice.post("/ui/approvals/"+lostRefund.ID+"/decide", alice.decision("approve", lostRefund.Fingerprint))
	fx.call("bot", "POST", "/v1/refunds", "ref-look-2", `{"order":"o-8","amount_minor":1200,"currency":"EUR"}`)
	holder := fx.pending(fx.call("bot", "POST", "/v1/releases", "rel-look-1", `{"environment":"production","v":1}`))
	fx.call("dana", "POST", "/v1/releases", "rel-look-2", `{"environment":"production","v":2}`, "Idempotency-Run", "run-d")
	fx.seal()
	at := func(path string, wait string) func(*fixture) []chromedp.Action[chromedp.Void] {
		return func(fx *fixture) []chromedp.Action[chromedp.Void] {
			return []chromedp.Action[chromedp.Void]{chromedp.Navigate(fx.srv.URL + path), chromedp.WaitVisible(chromedp.CSS(wait))}
		}
	}
	choose := func(id, button string) func(*fixture) []chromedp.Action[chromedp.Void] {
		return func(fx *fixture) []chromedp.Action[chromedp.Void] {
			return []chromedp.Action[chromedp.Void]{chromedp.Navigate(fx.srv.URL + "/ui/approvals/" + id),
				chromedp.WaitVisible(chromedp.ID("decide-form")), chromedp.SendKeys(chromedp.ID("note"), "looked at it"),
				chromedp.Click(chromedp.ID(button)), chromedp.WaitVisible(chromedp.ID("confirm-fingerprint"))}
		}
	}
	return []view{
		see("sign-in", "", at("/ui/signin", "#token")),
		see("sign-in refused", "", func(fx *fixture) []chromedp.Action[chromedp.Void] {
			return []chromedp.Action[chromedp.Void]{chromedp.Navigate(fx.srv.URL + "/ui/signin"),
				chromedp.SendKeys(chromedp.ID("token"), "tok_wrong"), chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
				chromedp.WaitVisible(chromedp.CSS(".problem"))}
		}),
		see("signed out", "", at("/ui/signin?signed-out", ".notice")),
		see("inbox", "alice", at("/ui/inbox", "#approval-"+a.ID)),
		see("inbox of a requester", "dana", at("/ui/inbox", "#approval-"+mine.ID+" .refusal")),
		see("approval", "alice", at("/ui/approvals/"+a.ID, "#decide-form")),
		see("approval of a route without parameters", "alice", at("/ui/approvals/"+refund.ID, "#decide-form")),
		see("approval, the requester's own", "dana", at("/ui/approvals/"+mine.ID, "#why-not")),
		see("confirm approve", "alice", choose(a.ID, "approve"), "#confirm-fingerprint", ".confirm .note"),
		see("confirm deny", "alice", choose(a.ID, "deny"), "#confirm-fingerprint", ".confirm .note"),
		see("approval decided", "alice", func(fx *fixture) []chromedp.Action[chromedp.Void] {
			return append(choose(decided.ID, "approve")(fx),
				chromedp.Evaluate[chromedp.Void](`document.getElementById("confirm").click()`),
				chromedp.WaitVisible(chromedp.CSS(".notice")))
		}),
		see("operations", "alice", at("/ui/operations", "#ops")),
		see("operations, none match", "alice", at("/ui/operations?state=failed", "#ops-empty")),
		see("operation with its approval", "alice", at("/ui/operations/"+a.OpID, "#timeline")),
		see("operation of a route without parameters", "alice", at("/ui/operations/"+refund.OpID, "#timeline")),
		see("operation that refused another request", "alice", at("/ui/operations/"+holder.OpID, "#timeline")),
		see("operation unknown, with the resolve form", "alice", at("/ui/operations/"+lost.ID, "#resolve-form")),
		see("operation unknown after its approval", "alice", at("/ui/operations/"+lostRefund.OpID, "#sent")),
		see("dashboard", "alice", at("/ui/dashboard", "#charts")),
		see("error: not found", "alice", at("/ui/nowhere", "#problem")),
		see("error: not for this role", "bot", at("/ui/inbox", "#problem")),
	}
}

// see is a view whose ink elements, if any, are drawn in the page's ink.
func see(name, who string, steps func(fx *fixture) []chromedp.Action[chromedp.Void], ink ...string) view {
	return view{name: name, who: who, steps: steps, ink: ink}
}

// contrastJS lists every text a person cannot read well: for each text
// node drawn on the page (and each form control's own text), its
// element's computed colour over the background composited from the
// page's canvas up through every ancestor (their backgrounds and
// opacities), checked against WCAG 2's AA ratio of 4.5:1. Text of a
// disabled control is exempt, as WCAG exempts inactive components.
const contrastJS = `(() => {
  const parse = (c) => {
    const m = /^rgba?\(([^)]*)\)$/.exec(c);
    if (!m) return null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, under) => {
    const a = top[3] + under[3] * (1 - top[3]);
    const mix = (i) => (top[i] * top[3] + under[i] * under[3] * (1 - top[3])) / a;
    return [mix(0), mix(1), mix(2), a];
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const bad = [];
  const check = (el, what) => {
    if (el.closest(":disabled")) return;
    const chain = [];
    for (let e = el; e; e = e.parentElement) chain.unshift(e);
    let under = [255, 255, 255, 1], opacity = 1, fg = null;
    for (const e of chain) {
      const s = getComputedStyle(e);
      opacity *= Number(s.opacity);
      if (s.backgroundImage !== "none") { bad.push(what + ": drawn over an image, which this test cannot judge"); return; }
      const bg = parse(s.backgroundColor);
      if (!bg) { bad.push(what + ": background " + s.backgroundColor + " not understood"); return; }
      bg[3] *= opacity;
      under = over(bg, under);
      if (e === el) fg = parse(s.color);
    }
    if (!fg) { bad.push(what + ": colour " + getComputedStyle(el).color + " not understood"); return; }
    fg[3] *= opacity;
    const ink = over(fg, under);
    const [hi, lo] = [lum(ink), lum(under)].sort((x, y) => y - x);
    const ratio = (hi + 0.05) / (lo + 0.05);
    if (ratio < 4.5) {
      const rgb = (c) => "rgb(" + c.slice(0, 3).map(Math.round).join(",") + ")";
      bad.push(what + ": " + rgb(ink) + " on " + rgb(under) + ", contrast " + ratio.toFixed(2) + ":1 (want 4.5:1)");
    }
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.textContent.trim();
    const el = n.parentElement;
    if (!text || !el || el.closest("script,style,template")) continue;
    if (el.getClientRects().length === 0 || getComputedStyle(el).visibility !== "visible") continue;
    check(el, JSON.stringify(text.slice(0, 60)) + " in <" + el.tagName.toLowerCase() + (el.className ? "." + el.className : "") + ">");
  }
  for (const el of document.querySelectorAll("input:not([type=hidden]):not([type=checkbox]):not([type=radio]),select,textarea")) {
    if (el.getClientRects().length) check(el, "the text of the control " + (el.id || el.name));
  }
  return bad;
})()`

// contrastCheckWorks: the check above is no decoration: white on white,
// pale grey, and text inside a translucent box are found; black on white
// and a disabled button are not.
func contrastCheckWorks(t *testing.T, browser context.Context) {
	ctx := tab(t, browser)
	page := `<body style="background:#fff"><p id=a style="color:#fff">white on white</p>` +
		`<p style="color:#aaa">pale grey</p><div style="opacity:0.3"><p>faint</p></div>` +
		`<p style="color:#000">black</p><button disabled style="opacity:.4">off</button></body>`
	do(t, ctx, chromedp.Navigate("data:text/html,"+strings.ReplaceAll(page, "#", "%23")), chromedp.WaitReady(chromedp.CSS("#a")))
	bad := eval[[]string](t, ctx, contrastJS)
	got := fmt.Sprint(bad)
	for _, want := range []string{"white on white", "pale grey", "faint"} {
		if !strings.Contains(got, want) {
			t.Errorf("the check missed %q: %v", want, bad)
		}
	}
	if slices.ContainsFunc(bad, func(s string) bool { return strings.Contains(s, "black") || strings.Contains(s, "off") }) {
		t.Errorf("the check refused readable or disabled text: %v", bad)
	}
}
