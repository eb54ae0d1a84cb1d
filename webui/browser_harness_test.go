package webui_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/webui"
)

// chromiumPath finds a Chromium (Debian's package: apt-get install
// chromium). Without one the browser tests skip, loudly, on a developer's
// machine, and fail under CI=true, where nothing may be skipped.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("IDEMGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "*** chromium not found: the browser tests of webui SKIP (under CI=true they FAIL). " +
		"Install it (apt-get install -y chromium) or set IDEMGATE_CHROMIUM."
	if testenv.InCI() {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
	return ""
}

// newBrowser starts one headless Chromium for every subtest.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// tab opens a tab in a browser context of its own (its own cookies: one
// person), bounded in time: a bound for a page that never comes (5 min,
// as the legibility tab's), never a window: a tab lives through its
// whole subtest, which on a loaded 2-core machine took over 30 s.
func tab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, 5*time.Minute)
	ctx, cancelTab := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
	t.Cleanup(func() { cancelTab(); cancel() })
	return ctx
}

// browse opens a tab signed in as who, through the sign-in form.
func (fx *fixture) browse(t *testing.T, browser context.Context, who string) context.Context {
	t.Helper()
	ctx := tab(t, browser)
	do(t, ctx, chromedp.Navigate(fx.srv.URL+"/ui/signin"),
		chromedp.SendKeys(chromedp.ID("token"), fx.tokens[who]),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.ID("whoami")))
	return ctx
}

func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

func run[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// text is the visible text of the element sel names.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return run(t, ctx, chromedp.Text(chromedp.CSS(sel)))
}

// eval evaluates a script in the page.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return run(t, ctx, chromedp.Evaluate[T](js))
}

// checkLabels fails if a control of the page has no label.
func checkLabels(t *testing.T, ctx context.Context) {
	t.Helper()
	unlabelled := eval[[]string](t, ctx, `[...document.querySelectorAll("input:not([type=hidden]),select,textarea")]
		.filter(e => !(e.labels && e.labels.length) && !e.getAttribute("aria-label")).map(e => e.name)`)
	if len(unlabelled) > 0 {
		t.Errorf("controls without a label on %s: %v", eval[string](t, ctx, "location.pathname"), unlabelled)
	}
}

// screenshot saves the page as docs/NAME.png when IDEMGATE_SCREENSHOTS=1:
// the README's pictures, rewritten on purpose only, never by CI.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("IDEMGATE_SCREENSHOTS") != "1" {
		return
	}
	png := run(t, ctx, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join("..", "docs", name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// series is a metrics history: the ten indicators, one point a minute.
type series struct{ now time.Time }

func (s series) Indicators(_ string, _ time.Duration) []webui.Indicator {
	names := []struct{ name, title, unit, help string }{
		{"idemgate_operations_created_total", "Operations created", "per minute", "New keys reserved and run."},
		{"idemgate_duplicates_total", "Duplicates recognised", "per minute", "Replays, and new keys with a known business identity."},
		{"idemgate_upstream_calls_avoided_total", "Upstream calls avoided", "per minute", "Keyed requests answered without the upstream."},
		{"idemgate_fingerprint_conflicts_total", "Fingerprint conflicts", "per minute", "Keys reused with another request."},
		{"idemgate_operations_stuck", "Stuck executing", "", "Operations executing past their lease."},
		{"idemgate_operations_unknown", "Unknown operations", "", "Operations whose outcome nobody knows."},
		{"idemgate_reconcile_seconds", "Time to reconcile", "seconds", "How long a resolved operation stayed unknown."},
		{"idemgate_retries_total", "Retries", "per minute", "Requests whose key had an operation already."},
		{"idemgate_manual_resolutions_total", "Manual resolutions", "per minute", "Unknown operations resolved by an operator."},
		{"idemgate_business_duplicates_total", "Business duplicates found", "per minute", "Resolved as duplicates despite the checks."},
	}
	var out []webui.Indicator
	for i, n := range names {
		in := webui.Indicator{Name: n.name, Title: n.title, Unit: n.unit, Help: n.help}
		for m := 60; m >= 0; m-- {
			v := math.Round(float64(10-i) * (1.2 + math.Sin(float64(m+i*7)/6)))
			in.Points = append(in.Points, webui.Point{At: s.now.Add(-time.Duration(m) * time.Minute), Value: v})
		}
		out = append(out, in)
	}
	return out
}

// contains fails unless every want is in got.
func contains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q is missing from:\n%s", what, w, got)
		}
	}
}
