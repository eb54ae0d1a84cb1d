package server_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
)

// TestUIThroughTheGateway: the page is mounted at /ui/, signs in with a
// principal's token from the gateway's configuration (a wrong one is
// refused), and shows the tenant's dashboard charted from the gateway's
// own metrics history. /favicon.ico is its icon, not a 401. An amount a
// route's schema marks as minor units is formatted in the inbox.
func TestUIThroughTheGateway(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	store, dsn := db.Open(t), db.DSN
	schema := filepath.Join(t.TempDir(), "payout.json")
	if err := os.WriteFile(schema, []byte(`{"type":"object","properties":{"currency":{"type":"string"},`+
		`"amount_minor":{"type":"integer","x-idemgate-minor-units":"/currency"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, store, dsn, "  - {match: POST /v1/payouts, upstream: ops, schema: "+schema+
		", approval: {approvers: [admin], summary: 'Pay {{.body.amount_minor}} {{.body.currency}}'}}\n")
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	get := func(path string) (int, string) {
		resp, err := client.Get(e.gw.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	icon, err := client.Get(e.gw.URL + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	icon.Body.Close()
	if icon.StatusCode != 200 || icon.Header.Get("Content-Type") != "image/svg+xml" {
		t.Fatalf("/favicon.ico: %d %s, want the page's icon", icon.StatusCode, icon.Header.Get("Content-Type"))
	}
	status, page := get("/ui/signin")
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if status != 200 || csrf == nil {
		t.Fatalf("sign-in page: %d, csrf %v\n%s", status, csrf, page)
	}
	post := func(token string) *http.Response {
		_, page := get("/ui/signin") // a fresh form for each try
		csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
		req, _ := http.NewRequest("POST", e.gw.URL+"/ui/signin",
			strings.NewReader(url.Values{"token": {token}, "csrf": {csrf[1]}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", e.gw.URL)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post("not-a-token"); resp.Request.URL.Path != "/ui/signin" {
		t.Fatalf("a wrong token signed in: ended at %s", resp.Request.URL)
	}
	e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "ui-1")
	e.g.Metrics().History().Sample(time.Now())
	if resp := post("alice-token"); resp.StatusCode != 200 || resp.Request.URL.Path == "/ui/signin" {
		t.Fatalf("alice's token: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	if r := e.do("POST", "/v1/payouts", "agent-token", `{"amount_minor":4999900,"currency":"EUR"}`, "Idempotency-Key", "pay-1"); r.status != 202 {
		t.Fatalf("a payout: %d %s", r.status, r.body)
	}
	if status, page = get("/ui/inbox"); status != 200 || !strings.Contains(page, "49,999.00 EUR") {
		t.Fatalf("the inbox does not format the payout's amount, which the route's schema marks: %d\n%s", status, page)
	}
	status, page = get("/ui/dashboard")
	if status != 200 || !strings.Contains(page, "Operations created") || strings.Contains(page, "No data yet") ||
		strings.Contains(page, "alice-token") {
		t.Fatalf("dashboard: %d\n%s", status, page)
	}
}

// TestSessionSharesAreSettings: ui.max_sessions_per_tenant bounds one
// tenant's sessions: past it, its newcomer is refused 503 and the log
// names the setting, while another tenant's principal signs in.
func TestSessionSharesAreSettings(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, "ui: {max_sessions_per_tenant: 1}\n")
	if status, path := signIn(t, clientFrom("127.0.0.1"), e.gw.URL, "alice-token"); status != 200 || path == "/ui/signin" {
		t.Fatalf("acme's first: %d at %s", status, path)
	}
	if status, _ := signIn(t, clientFrom("127.0.0.1"), e.gw.URL, "agent-token"); status != 503 {
		t.Fatalf("acme's second, its share taken: %d", status)
	}
	if !strings.Contains(e.logs.String(), "ui.max_sessions_per_tenant") {
		t.Fatalf("the log does not name the setting:\n%s", e.logs.String())
	}
	if status, path := signIn(t, clientFrom("127.0.0.1"), e.gw.URL, "globex-token"); status != 200 || path == "/ui/signin" {
		t.Fatalf("globex: %d at %s", status, path)
	}
}
