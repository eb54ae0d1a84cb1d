package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// sqliteEnv is a gateway on a new SQLite store.
func sqliteEnv(t *testing.T) *env {
	db := dbtest.SQLiteDB(t)
	return newEnv(t, db.Open(t), db.DSN, "")
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// rewrite changes the running configuration's file with edit.
func (e *env) rewrite(edit func(string) string) {
	e.t.Helper()
	path := e.g.Config().File()
	data, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(edit(string(data))), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// addRoute and the principals' edits are the reloads the tests make.
func addRoute(route string) func(string) string {
	return func(s string) string { return s + "  - " + route + "\n" }
}

func replace(old, new string) func(string) string {
	return func(s string) string { return strings.Replace(s, old, new, 1) }
}

const newbie = "  - {name: newbie, tenant: acme, roles: [agent], token_sha256: "

// TestReloadServesTheNewFile: a valid file applies to the requests that
// follow: a new route is served (one effect), a new principal is known,
// a removed one is refused, and the reload is counted.
func TestReloadServesTheNewFile(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		if r := e.do("POST", "/v1/refs", "agent-token", `{}`, "Idempotency-Key", "r1"); r.status != 404 {
			t.Fatalf("before the reload: %d %s", r.status, r.body)
		}
		e.rewrite(func(s string) string {
			s = addRoute("{match: POST /v1/refs, upstream: ops}")(s)
			s = replace("principals:\n", "principals:\n"+newbie+sha("newbie-token")+"}\n")(s)
			return regexp.MustCompile(`(?m)^  - \{name: other,.*\n`).ReplaceAllString(s, "")
		})
		if err := e.g.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if r := e.do("POST", "/v1/refs", "newbie-token", `{}`, "Idempotency-Key", "r1"); r.status != 201 {
				t.Fatalf("the new route, by the new principal: %d %s", r.status, r.body)
			}
		}
		if n := e.up.count("/v1/refs"); n != 1 {
			t.Fatalf("%d effects of one key", n)
		}
		if r := e.do("POST", "/v1/tickets", "globex-token", `{}`, "Idempotency-Key", "g1"); r.status != 401 {
			t.Fatalf("a removed principal: %d %s", r.status, r.body)
		}
		fams := e.scrape()
		if v := value(fams, "idemgate_config_reloads_total"); v != 1 {
			t.Fatalf("config_reloads_total %v", v)
		}
		if v := value(fams, "idemgate_config_reload_errors_total"); v != 0 {
			t.Fatalf("config_reload_errors_total %v", v)
		}
	})
}

// TestReloadKeepsTheRunningConfigurationOnAnInvalidFile: the error names
// the file and line, in the answer and the log, and is counted; the
// running routes and principals serve as before.
func TestReloadKeepsTheRunningConfigurationOnAnInvalidFile(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		e.rewrite(func(s string) string {
			s = addRoute("{match: POST /v1/refs, upstream: ops}")(s)
			s = replace("principals:\n", "principals:\n"+newbie+sha("newbie-token")+"}\n")(s)
			return addRoute("{match: POST /v1/broken, upstream: nowhere}")(s)
		})
		lines := strings.Count(mustRead(t, e.g.Config().File()), "\n")
		err := e.g.Reload(context.Background())
		where := e.g.Config().File() + ":" + strconv.Itoa(lines)
		if err == nil || !strings.Contains(err.Error(), where+`: route POST /v1/broken: upstream "nowhere" is not defined`) {
			t.Fatalf("reload: %v, want the error at %s", err, where)
		}
		if !strings.Contains(e.logs.String(), where) {
			t.Fatalf("the log does not name %s:\n%s", where, e.logs.String())
		}
		if r := e.do("POST", "/v1/refs", "agent-token", `{}`, "Idempotency-Key", "r1"); r.status != 404 {
			t.Fatalf("a route of the refused file: %d %s", r.status, r.body)
		}
		if r := e.do("POST", "/v1/tickets", "newbie-token", `{}`, "Idempotency-Key", "n1"); r.status != 401 {
			t.Fatalf("a principal of the refused file: %d %s", r.status, r.body)
		}
		if r := e.do("POST", "/v1/tickets", "globex-token", `{}`, "Idempotency-Key", "g1"); r.status != 201 {
			t.Fatalf("the running configuration: %d %s", r.status, r.body)
		}
		fams := e.scrape()
		if v := value(fams, "idemgate_config_reload_errors_total"); v != 1 {
			t.Fatalf("config_reload_errors_total %v", v)
		}
		if v := value(fams, "idemgate_config_reloads_total"); v != 0 {
			t.Fatalf("config_reloads_total %v", v)
		}
	})
}

// TestReloadRefusesWhatNeedsARestart: a file that changes the store, the
// listener or the metrics listener is refused whole, saying a restart is
// needed, even when the rest of it would be fine.
func TestReloadRefusesWhatNeedsARestart(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	// The running listen is the default, 127.0.0.1:8080: written out, it is
	// no change.
	original := "listen: 127.0.0.1:8080\n" + mustRead(t, e.g.Config().File())
	// The listener's TLS is set up at start: its files' contents rotate
	// by themselves, a new tls setting needs a restart.
	dir := t.TempDir()
	certPEM, keyPEM := testenv.NewCA(t, "reload CA").Server(t, "127.0.0.1")
	cert, key := testenv.WriteFile(t, dir, "gw.crt", certPEM), testenv.WriteFile(t, dir, "gw.key", keyPEM)
	for name, edit := range map[string]func(string) string{
		"store": func(s string) string {
			return regexp.MustCompile(`(?m)^store: .*$`).ReplaceAllString(s, "store: sqlite:/elsewhere.db")
		},
		"listen":         replace("listen: 127.0.0.1:8080", "listen: 127.0.0.1:1"),
		"metrics_listen": func(s string) string { return "metrics_listen: 127.0.0.1:0\n" + s },
		"tls":            func(s string) string { return "tls: {cert: " + cert + ", key: " + key + "}\n" + s },
		"mcp_servers": func(s string) string {
			return "mcp_servers: [{name: tickets, url: 'http://127.0.0.1:1/mcp'}]\n" + s
		},
		"consumers": func(s string) string {
			return "consumers: [{name: billing, tenant: acme, deliver: {upstream: ops, method: POST, path: /v1/refs},\n" +
				"  source: {nats: 'nats://127.0.0.1:4222', stream: BILLING, consumer: c, subject: 'billing.>'}, dead_letter: {subject: billing.dead}}]\n" + s
		},
	} {
		e.rewrite(func(string) string { return addRoute("{match: POST /v1/refs, upstream: ops}")(edit(original)) })
		err := e.g.Reload(context.Background())
		if err == nil || !strings.Contains(err.Error(), name+" changed: that needs a restart") {
			t.Fatalf("%s: %v", name, err)
		}
		if r := e.do("POST", "/v1/refs", "agent-token", `{}`, "Idempotency-Key", "r-"+name); r.status != 404 {
			t.Fatalf("%s: a route of the refused file: %d %s", name, r.status, r.body)
		}
	}
	e.rewrite(func(string) string { return addRoute("{match: POST /v1/refs, upstream: ops}")(original) })
	if err := e.g.Reload(context.Background()); err != nil {
		t.Fatalf("the same file, with the start's settings: %v", err)
	}
}

// TestReloadLetsRequestsInFlightFinish: a request that began under the
// old configuration ends under it, though the reload removed its route;
// the next one is refused, and the key has one effect.
func TestReloadLetsRequestsInFlightFinish(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		started, release := make(chan struct{}), make(chan struct{})
		var effects atomic.Int64
		e := newEnvWith(t, db.Open(t), db.DSN, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			effects.Add(1)
			close(started)
			<-release
			w.WriteHeader(201)
		}))
		var wg sync.WaitGroup
		var first reply
		wg.Go(func() { first = e.do("POST", "/v1/policy/bare", "agent-token", `{}`, "Idempotency-Key", "s1") })
		<-started
		e.rewrite(replace("  - {match: POST /v1/policy/bare, upstream: bare}\n", ""))
		if err := e.g.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r := e.do("POST", "/v1/policy/bare", "agent-token", `{}`, "Idempotency-Key", "s2"); r.status != 404 {
			t.Fatalf("after the reload: %d %s", r.status, r.body)
		}
		close(release)
		wg.Wait()
		if first.status != 201 {
			t.Fatalf("the request in flight: %d %s", first.status, first.body)
		}
		if n := effects.Load(); n != 1 {
			t.Fatalf("%d effects", n)
		}
	})
}

// TestReloadThroughTheControlAPI: an operator may ask for a reload, and
// reads why a file was refused, the file named without the directories
// of the gateway's disk; anyone else is 403 and nothing changes.
func TestReloadThroughTheControlAPI(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	e.rewrite(func(s string) string { return "operators: [alice]\n" + s })
	if err := e.g.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.rewrite(addRoute("{match: POST /v1/refs, upstream: ops}"))
	if r := e.do("POST", "/_idem/v1/config/reload", "agent-token", ""); r.status != 403 || code(r) != "forbidden" {
		t.Fatalf("an agent: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/refs", "agent-token", `{}`, "Idempotency-Key", "r1"); r.status != 404 {
		t.Fatalf("not reloaded by an agent: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/_idem/v1/config/reload", "alice-token", ""); r.status != 200 ||
		!strings.Contains(r.body, `"reloaded":true`) {
		t.Fatalf("an operator: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/refs", "agent-token", `{}`, "Idempotency-Key", "r1"); r.status != 201 {
		t.Fatalf("reloaded by an operator: %d %s", r.status, r.body)
	}
	e.rewrite(addRoute("{match: POST /v1/broken, upstream: nowhere}"))
	r := e.do("POST", "/_idem/v1/config/reload", "alice-token", "")
	if r.status != 400 || code(r) != "invalid_request" || !strings.Contains(r.body, `kept: gw.yaml:`) ||
		!strings.Contains(r.body, "the running one is kept") || strings.Contains(r.body, filepath.Dir(e.g.Config().File())) {
		t.Fatalf("a broken file: %d %s", r.status, r.body)
	}
	if !strings.Contains(e.logs.String(), e.g.Config().File()+":") {
		t.Fatalf("the log does not name the file whole:\n%s", e.logs.String())
	}
}

// TestReloadEndsTheWebPagesSessions: a session signed in under the old
// configuration ends with it, so a principal the reload removed is not
// left signed in; the principals that remain sign in again.
func TestReloadEndsTheWebPagesSessions(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	at := func(path string) string {
		resp, err := client.Get(e.gw.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Request.URL.Path
	}
	signIn := func(token string) string {
		resp, err := client.Get(e.gw.URL + "/ui/signin")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
		req, _ := http.NewRequest("POST", e.gw.URL+"/ui/signin",
			strings.NewReader(url.Values{"token": {token}, "csrf": {string(csrf[1])}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", e.gw.URL)
		if resp, err = client.Do(req); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Request.URL.Path
	}
	if p := signIn("alice-token"); p == "/ui/signin" {
		t.Fatal("alice could not sign in")
	}
	if p := at("/ui/dashboard"); p != "/ui/dashboard" {
		t.Fatalf("signed in, the dashboard ended at %s", p)
	}
	e.rewrite(func(s string) string {
		return regexp.MustCompile(`(?m)^  - \{name: alice,.*\n`).ReplaceAllString(s, "")
	})
	if err := e.g.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := at("/ui/dashboard"); p != "/ui/signin" {
		t.Fatalf("a removed principal's session outlived the reload: %s", p)
	}
	if p := signIn("alice-token"); p != "/ui/signin" {
		t.Fatalf("a removed principal signed in: %s", p)
	}
}

// TestReloadNeedsAnOperator: a reload is the whole gateway's, every
// tenant's: neither a tenant's admin nor a JWT's admin of a tenant no
// configuration names may ask for one, only a principal the
// configuration names in operators:. Refused, nothing is reloaded.
func TestReloadNeedsAnOperator(t *testing.T) {
	t.Parallel()
	e, p := jwtSQLite(t, "")
	stranger := sign(t, p, "k1", claims(p, map[string]any{"org": "nobody-configured"})) // roles agent, admin
	e.rewrite(replace("routes:\n", "routes:\n  - {match: POST /v1/refs, upstream: ops}\n"))
	for name, tok := range map[string]string{"acme's admin": "alice-token", "a JWT admin": stranger} {
		if r := e.do("POST", "/_idem/v1/config/reload", tok, ""); r.status != 403 || code(r) != "forbidden" {
			t.Errorf("%s: %d %s", name, r.status, r.body)
		}
	}
	if r := e.do("POST", "/v1/refs", "agent-token", `{}`, "Idempotency-Key", "r1"); r.status != 404 {
		t.Fatalf("reloaded by a tenant's admin: %d %s", r.status, r.body)
	}
	e.rewrite(func(s string) string {
		return "operators: [ops]\n" + replace("principals:\n", "principals:\n  - {name: ops, tenant: ops, "+
			"token_sha256: "+sha("ops-token")+"}\n")(s)
	})
	if err := e.g.Reload(context.Background()); err != nil { // SIGHUP: the host's, no token
		t.Fatal(err)
	}
	e.rewrite(replace("routes:\n", "routes:\n  - {match: POST /v1/cut2, upstream: ops}\n"))
	for name, tok := range map[string]string{"acme's admin": "alice-token", "a JWT admin": stranger} {
		if r := e.do("POST", "/_idem/v1/config/reload", tok, ""); r.status != 403 ||
			!strings.Contains(r.body, "operators") {
			t.Errorf("%s, operators named: %d %s", name, r.status, r.body)
		}
	}
	if r := e.do("POST", "/_idem/v1/config/reload", "ops-token", ""); r.status != 200 {
		t.Fatalf("an operator: %d %s", r.status, r.body)
	}
}

// signedIn reports whether c's session still opens the dashboard.
func (e *env) signedIn(c *http.Client) bool {
	e.t.Helper()
	resp, err := c.Get(e.gw.URL + "/ui/dashboard")
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.Request.URL.Path == "/ui/dashboard"
}

// TestReloadKeepsUnchangedSessions: a reload signs out only the web
// page's sessions whose principal it changed: none when the file is the
// same, or changes only a route; a static principal's whose roles or
// token changed; a JWT's whose auth.jwt settings changed.
func TestReloadKeepsUnchangedSessions(t *testing.T) {
	t.Parallel()
	e, p := jwtSQLite(t, "")
	people := map[string]string{"alice": "alice-token", "agent": "agent-token", "jwt": sign(t, p, "k1", claims(p, nil))}
	browsers := map[string]*http.Client{}
	for who, tok := range people {
		browsers[who] = clientFrom("127.0.0.1")
		if status, path := signIn(t, browsers[who], e.gw.URL, tok); status != 200 || path == "/ui/signin" {
			t.Fatalf("%s signs in: %d at %s", who, status, path)
		}
	}
	reload := func(what string, edit func(string) string, out ...string) {
		t.Helper()
		e.rewrite(edit)
		if err := e.g.Reload(context.Background()); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for who, b := range browsers {
			if want := !slices.Contains(out, who); e.signedIn(b) != want {
				t.Fatalf("%s: %s signed in %t, want %t", what, who, !want, want)
			}
		}
		for _, who := range out {
			delete(browsers, who)
		}
	}
	reload("the same file", func(s string) string { return s })
	reload("a new route", replace("routes:\n", "routes:\n  - {match: POST /v1/refs, upstream: ops}\n"))
	reload("alice's roles", replace("name: alice, tenant: acme, roles: [admin]", "name: alice, tenant: acme, "+
		"roles: [admin, approver]"), "alice")
	reload("agent's token", replace(sha("agent-token"), sha("agent-token-2")), "agent")
	reload("auth.jwt's roles claim", replace("roles_claim: realm_access.roles", "roles_claim: roles"), "jwt")
}

// TestTightenedApproversApplyToOpenApprovals: a reload that takes a role
// off a route's approvers applies to the approvals already open: a
// principal holding only that role may no longer decide one (403, and
// the write does not run), one holding a role still listed may.
func TestTightenedApproversApplyToOpenApprovals(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	e.rewrite(func(s string) string {
		s = replace("principals:\n", "principals:\n  - {name: carol, tenant: acme, roles: [approver], token_sha256: "+
			sha("carol-token")+"}\n")(s)
		return replace("routes:\n", "routes:\n  - {match: POST /v1/policy/prod, upstream: ops, approval: "+
			"{approvers: [admin, approver], ttl: 1h, summary: Deploy}}\n")(s)
	})
	if err := e.g.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := e.awaited(e.do("POST", "/v1/policy/prod", "agent-token", `{"v":1}`, "Idempotency-Key", "p-1"))
	e.rewrite(replace("approvers: [admin, approver]", "approvers: [admin]"))
	if err := e.g.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	decision := fmt.Sprintf(`{"fingerprint":%q,"note":"checked"}`, a.Fingerprint)
	if d := e.do("POST", "/_idem/v1/approvals/"+a.ID+"/approve", "carol-token", decision); d.status != 403 {
		t.Fatalf("an approver the reload removed: %d %s", d.status, d.body)
	}
	if r := e.do("POST", "/v1/policy/prod", "agent-token", `{"v":1}`, "Idempotency-Key", "p-1"); r.status != 202 ||
		e.up.count("/v1/policy/prod") != 0 {
		t.Fatalf("the write ran on a removed approver's word: %d %s", r.status, r.body)
	}
	if d := e.do("POST", "/_idem/v1/approvals/"+a.ID+"/approve", "alice-token", decision); d.status != 200 {
		t.Fatalf("an approver still listed: %d %s", d.status, d.body)
	}
	if r := e.do("POST", "/v1/policy/prod", "agent-token", `{"v":1}`, "Idempotency-Key", "p-1"); r.status != 201 ||
		e.up.count("/v1/policy/prod") != 1 {
		t.Fatalf("the approved write: %d %s, %d effects", r.status, r.body, e.up.count("/v1/policy/prod"))
	}
}

// TestReloadKeepsEachOperationsFingerprintRules: an operation keeps the
// fingerprint rules it was made under (issue 34, 16). A reload that stops
// ignoring a member leaves an answered key replaying, even to a retry
// whose ignored member differs, rather than 422 fingerprint_mismatch; a
// command that differs under the operation's own rules is still refused;
// and a key made after the reload is bound by the new rules.
func TestReloadKeepsEachOperationsFingerprintRules(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		first := e.do("POST", "/v1/tickets", "agent-token", `{"title":"disk","client_time":"1"}`, "Idempotency-Key", "fr1")
		if first.status != 201 {
			t.Fatalf("first: %d %s", first.status, first.body)
		}
		e.rewrite(replace("fingerprint: {ignore: [/client_time]}", "fingerprint: {headers: [X-Region]}"))
		if err := e.g.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{`{"title":"disk","client_time":"1"}`, `{"title":"disk","client_time":"2"}`} {
			r := e.do("POST", "/v1/tickets", "agent-token", body, "Idempotency-Key", "fr1", "X-Region", "eu")
			if r.status != 201 || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("a retry after the reload, %s: %d %s", body, r.status, r.body)
			}
		}
		changed := e.do("POST", "/v1/tickets", "agent-token", `{"title":"cpu","client_time":"1"}`, "Idempotency-Key", "fr1")
		if changed.status != 422 || code(changed) != "fingerprint_mismatch" {
			t.Fatalf("another command under the old rules: %d %s", changed.status, changed.body)
		}
		if r := e.do("POST", "/v1/tickets", "agent-token", `{"title":"x"}`, "Idempotency-Key", "fr2", "X-Region", "eu"); r.status != 201 {
			t.Fatalf("a new key: %d %s", r.status, r.body)
		}
		if r := e.do("POST", "/v1/tickets", "agent-token", `{"title":"x"}`, "Idempotency-Key", "fr2", "X-Region", "us"); r.status != 422 {
			t.Fatalf("a new key's header, now fingerprinted: %d %s", r.status, r.body)
		}
		if n := e.up.count("/v1/tickets"); n != 2 {
			t.Fatalf("%d effects, want 2", n)
		}
	})
}
