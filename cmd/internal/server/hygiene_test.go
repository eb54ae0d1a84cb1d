package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// recorder is an upstream that keeps every request exactly as it arrived:
// what the gateway forwarded, not what it meant to. Its answers carry
// Location and Content-Location at its own address when asked to.
type recorder struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []received
}

// received is one request as the upstream saw it.
type received struct {
	method, uri string
	header      http.Header
}

func newRecorder(t *testing.T) *recorder {
	u := &recorder{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.got = append(u.got, received{r.Method, r.RequestURI, r.Header.Clone()})
		u.mu.Unlock()
		prefix := ""
		if strings.HasPrefix(r.URL.Path, "/api/") {
			prefix = "/api"
		}
		if r.Header.Get("X-Answer-Hop") != "" {
			// An upstream that talks to its own proxy: none of this is
			// the agent's, and none of it is stored for a replay.
			w.Header().Set("Connection", "X-Upstream-Private, x-other-private")
			w.Header().Set("X-Upstream-Private", "1")
			w.Header().Set("X-Other-Private", "2")
			w.Header().Set("Proxy-Connection", "keep-alive")
			w.Header().Set("Keep-Alive", "timeout=5")
			w.Header().Set("X-Kept", "3")
		}
		switch r.Header.Get("X-Answer-Location") {
		case "self":
			w.Header().Set("Location", "http://"+r.Host+prefix+"/v1/things/1?view=full#top")
			w.Header().Set("Content-Location", "http://"+strings.ToUpper(r.Host)+prefix+"/v1/things/1")
		case "path":
			w.Header().Set("Location", prefix+"/v1/things/1")
		case "other":
			w.Header().Set("Location", "https://elsewhere.example/v1/things/1")
		case "spelled": // the upstream's own origin, spelled otherwise
			_, port, _ := net.SplitHostPort(r.Host)
			w.Header().Set("Location", "http://localhost.:"+port+prefix+"/v1/things/1")
			w.Header().Set("Content-Location", "http://[::ffff:127.0.0.1]:"+port+prefix+"/v1/things/2")
		}
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"n":%d}`, len(u.got))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// requests returns how many requests arrived, and the last one.
func (u *recorder) requests() (int, received) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.got) == 0 {
		return 0, received{}
	}
	return len(u.got), u.got[len(u.got)-1]
}

const hygieneConfig = `store: sqlite:%s
upstreams:
  ops: {url: %s, headers: {Authorization: "Bearer upstream-secret"}, forward_key: true}
  prefixed: {url: %s/api}
principals:
  - {name: agent, tenant: acme, roles: [agent], token_sha256: %s}
  - {name: alice, tenant: acme, roles: [admin], token_sha256: %s}
routes:
  - {match: "PUT /v1/things/{id}", upstream: ops, require_key: true}
  - {match: "GET /v1/things/{id}", upstream: ops}
  - {match: "PUT /v2/things/{id}", upstream: prefixed, require_key: true}
  - {match: "GET /v2/things/{id}", upstream: prefixed}
  - {match: POST /v1/admin-only, upstream: ops, roles: [admin]}
`

// hygieneEnv is a gateway on SQLite in front of a recorder: hygiene does
// not depend on the store.
type hygieneEnv struct {
	t     *testing.T
	up    *recorder
	gw    *httptest.Server
	store ledger.Store
	keys  int
}

func newHygieneEnv(t *testing.T) *hygieneEnv {
	up := newRecorder(t)
	dir := t.TempDir()
	store := dbtest.SQLiteAt(t, filepath.Join(dir, "gw.db"))
	path := filepath.Join(dir, "gw.yaml")
	text := fmt.Sprintf(hygieneConfig, filepath.Join(dir, "gw.db"), up.srv.URL, up.srv.URL, sha("agent-token"), sha("alice-token"))
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := server.New(cfg, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g.Handler())
	t.Cleanup(gw.Close)
	return &hygieneEnv{t: t, up: up, gw: gw, store: store}
}

// kinds are the two ways through the gateway: a recorded write (PUT, with
// a fresh key) and a proxied read (GET).
var kinds = []string{"write", "read"}

// send sends rawPath exactly as written, as a write or a read, as the
// agent unless header says otherwise.
func (e *hygieneEnv) send(kind, rawPath string, header http.Header) reply {
	e.t.Helper()
	method, body := http.MethodGet, ""
	if kind == "write" {
		method, body = http.MethodPut, `{}`
	}
	gw, _ := url.Parse(e.gw.URL)
	req, _ := http.NewRequest(method, e.gw.URL, strings.NewReader(body))
	req.URL = &url.URL{Scheme: "http", Host: gw.Host, Opaque: rawPath}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header["Authorization"] == nil {
		req.Header.Set("Authorization", "Bearer agent-token")
	}
	if e.keys++; kind == "write" && req.Header["Idempotency-Key"] == nil {
		req.Header.Set("Idempotency-Key", fmt.Sprintf("hygiene-%d", e.keys))
	}
	return roundTrip(e.t, req)
}

// refused checks that r is a 400 invalid_request and that neither the
// upstream nor the store saw anything of it.
func (e *hygieneEnv) refused(r reply, before int) {
	e.t.Helper()
	n, _ := e.up.requests()
	page, err := e.store.List(context.Background(), ledger.ListParams{Tenant: "acme"})
	if err != nil {
		e.t.Fatal(err)
	}
	if r.status != 400 || code(r) != "invalid_request" || n != before || len(page.Operations) != 0 {
		e.t.Errorf("%d %s; the upstream got %d request(s), the store %d operation(s)", r.status, r.body,
			n-before, len(page.Operations))
	}
}

// forwarded checks that r was answered by the upstream, which got exactly
// one request for it, and returns that request.
func (e *hygieneEnv) forwarded(r reply, before int) received {
	e.t.Helper()
	n, last := e.up.requests()
	if r.status != 201 || n != before+1 {
		e.t.Fatalf("%d %s; the upstream got %d request(s)", r.status, r.body, n-before)
	}
	return last
}

// TestEscapedPathIsForwardedAsReceived: %2F stays %2F on writes as on
// reads (a write decoded it, and /v1/things/..%2F..%2Fv1%2Fadmin-only
// reached the upstream as /v1/things/../../v1/admin-only).
func TestEscapedPathIsForwardedAsReceived(t *testing.T) {
	t.Parallel()
	e := newHygieneEnv(t)
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			for _, c := range []struct{ sent, want string }{
				{"/v1/things/a%2Fb", "/v1/things/a%2Fb"},
				{"/v1/things/a%2fb%41", "/v1/things/a%2fb%41"},
				{"/v1/things/report.v2", "/v1/things/report.v2"},
				{"/v1/things/...", "/v1/things/..."},
				{"/v2/things/a%2Fb?x=%2F", "/api/v2/things/a%2Fb?x=%2F"},
			} {
				before, _ := e.up.requests()
				if got := e.forwarded(e.send(kind, c.sent, nil), before); got.uri != c.want {
					t.Errorf("%s reached the upstream as %s, want %s", c.sent, got.uri, c.want)
				}
			}
		})
	}
}

// TestDotSegmentsAreRefused: a dot segment, as sent or as an upstream
// might read it, is 400 before anything is reserved or forwarded.
func TestDotSegmentsAreRefused(t *testing.T) {
	t.Parallel()
	e := newHygieneEnv(t)
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			for _, path := range []string{
				"/v1/things/..%2F..%2Fv1%2Fadmin-only", "/v1/things/..", "/v1/things/.", "/v1/things/%2e",
				"/v1/things/%2E%2e", "/v1/things/.%2E", "/v1/things/%2e%2e/%2e%2e/v1/admin-only",
				"/v1/things/a%2F..%2Fb", "/v1/things/..%5C..%5Cv1%5Cadmin-only", "/v1/things/a%5c.",
				`/v1/things/..\..\v1\admin-only`, "/v1/things/%252e%252e%252Fadmin-only", "/v1/things/..;x",
				"/v1/../v1/things/1", "/v1/things/./1",
			} {
				before, _ := e.up.requests()
				t.Run(path, func(t *testing.T) { e.t = t; e.refused(e.send(kind, path, nil), before) })
			}
		})
	}
}

// TestConnectionNamedHeadersAreRemoved: every header Connection names is
// hop-by-hop, like Keep-Alive and Te.
func TestConnectionNamedHeadersAreRemoved(t *testing.T) {
	t.Parallel()
	e := newHygieneEnv(t)
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			before, _ := e.up.requests()
			sent := http.Header{"Connection": {"X-Custom, x-other"}, "X-Custom": {"1"}, "X-Other": {"2"},
				"Keep-Alive": {"timeout=5"}, "Te": {"gzip"}, "Proxy-Connection": {"keep-alive"}, "X-Kept": {"3"},
				"X-Answer-Hop": {"1"}, "Idempotency-Key": {"hop-" + kind}}
			answer := e.send(kind, "/v1/things/1", sent)
			got := e.forwarded(answer, before)
			answers := []reply{answer}
			if kind == "write" {
				answers = append(answers, e.send(kind, "/v1/things/1", sent)) // the stored answer
			}
			for _, h := range []string{"X-Custom", "X-Other", "Keep-Alive", "Te", "Proxy-Connection"} {
				if v := got.header.Values(h); v != nil {
					t.Errorf("the upstream got %s: %q", h, v)
				}
			}
			if got.header.Get("X-Kept") != "3" {
				t.Errorf("an end-to-end header was removed: %v", got.header)
			}
			for i, a := range answers {
				for _, h := range []string{"X-Upstream-Private", "X-Other-Private", "Keep-Alive", "Proxy-Connection"} {
					if v := a.header.Values(h); v != nil {
						t.Errorf("answer %d: the agent got the upstream's %s: %q", i, h, v)
					}
				}
				if a.header.Get("X-Kept") != "3" {
					t.Errorf("answer %d: an end-to-end header was removed: %v", i, a.header)
				}
			}
			if kind == "write" && answers[1].header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("the second answer is not the replay: %+v", answers[1])
			}
		})
	}
}

// TestAgentHeadersNeverReachTheUpstream: the agent's credentials, cookies,
// forwarding claims, method overrides and URL overrides (X-Original-URL,
// X-Rewrite-URL, which IIS and Symfony-style servers route by) stay at the
// gateway, which says itself where the request came from.
func TestAgentHeadersNeverReachTheUpstream(t *testing.T) {
	t.Parallel()
	e := newHygieneEnv(t)
	host := strings.TrimPrefix(e.gw.URL, "http://")
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			before, _ := e.up.requests()
			got := e.forwarded(e.send(kind, "/v1/things/1", http.Header{"Cookie": {"session=agent"},
				"Proxy-Authorization": {"Basic YWdlbnQ6c2VjcmV0"}, "Forwarded": {"for=6.6.6.6;proto=https"},
				"X-Forwarded-For": {"6.6.6.6"}, "X-Forwarded-Host": {"admin.internal"}, "X-Forwarded-Proto": {"https"},
				"X-Forwarded-Prefix": {"/admin"}, "X-Real-Ip": {"6.6.6.6"}, "X-Http-Method-Override": {"DELETE"},
				"X-Http-Method": {"DELETE"}, "X-Method-Override": {"DELETE"}, "X-Original-Url": {"/v1/admin-only"},
				"X-Rewrite-Url": {"/v1/admin-only"}}), before)
			for _, h := range []string{"Cookie", "Proxy-Authorization", "Forwarded", "X-Forwarded-Prefix", "X-Real-Ip",
				"X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-Url", "X-Rewrite-Url"} {
				if v := got.header.Values(h); v != nil {
					t.Errorf("the upstream got %s: %q", h, v)
				}
			}
			want := map[string]string{"Authorization": "Bearer upstream-secret", "X-Forwarded-For": "127.0.0.1",
				"X-Forwarded-Host": host, "X-Forwarded-Proto": "http"}
			for h, v := range want {
				if got := got.header.Values(h); len(got) != 1 || got[0] != v {
					t.Errorf("the upstream got %s: %q, want %q", h, got, v)
				}
			}
		})
	}
}

// TestUnderscoreHeaderNamesAreRefused: Idempotency_Key, which some servers
// read as Idempotency-Key, must not travel next to the gateway's own key.
func TestUnderscoreHeaderNamesAreRefused(t *testing.T) {
	t.Parallel()
	e := newHygieneEnv(t)
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			for _, name := range []string{"Idempotency_Key", "X_Forwarded_For", "x_anything"} {
				before, _ := e.up.requests()
				e.refused(e.send(kind, "/v1/things/1", http.Header{name: {"globex:stolen"}}), before)
			}
		})
	}
}

// TestRepeatedCredentialsAndKeysAreRefused: with two Authorization or two
// Idempotency-Key headers, nobody can tell which one was meant.
func TestRepeatedCredentialsAndKeysAreRefused(t *testing.T) {
	t.Parallel()
	e := newHygieneEnv(t)
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			for _, h := range []http.Header{
				{"Authorization": {"Bearer agent-token", "Bearer alice-token"}},
				{"Authorization": {"Bearer agent-token", "Bearer agent-token"}},
				{"Idempotency-Key": {"k1", "k2"}},
			} {
				before, _ := e.up.requests()
				e.refused(e.send(kind, "/v1/things/1", h), before)
			}
		})
	}
}

// TestUpstreamLocationIsTheGatewaysPath: a Location or Content-Location
// at the upstream's own origin becomes the gateway's path, its prefix
// stripped, on the first answer, its replay, and reads, however it is
// spelled (localhost., [::ffff:127.0.0.1]); other origins stay.
func TestUpstreamLocationIsTheGatewaysPath(t *testing.T) {
	t.Parallel()
	e := newHygieneEnv(t)
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			e.t = t
			for _, c := range []struct{ path, answer, location, contentLocation string }{
				{"/v1/things/1", "self", "/v1/things/1?view=full#top", "/v1/things/1"},
				{"/v2/things/1", "self", "/v1/things/1?view=full#top", "/v1/things/1"},
				{"/v2/things/1", "path", "/v1/things/1", ""},
				{"/v1/things/1", "other", "https://elsewhere.example/v1/things/1", ""},
				{"/v2/things/1", "spelled", "/v1/things/1", "/v1/things/2"},
			} {
				h := http.Header{"X-Answer-Location": {c.answer}, "Idempotency-Key": {fmt.Sprintf("loc-%d", e.keys)}}
				before, _ := e.up.requests()
				first := e.send(kind, c.path, h)
				e.forwarded(first, before)
				again := e.send(kind, c.path, h)
				if kind == "write" && again.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("%s: not replayed: %+v", c.path, again)
				}
				for _, r := range []reply{first, again} {
					if r.header.Get("Location") != c.location || r.header.Get("Content-Location") != c.contentLocation {
						t.Errorf("%s answered with %q: Location %q, Content-Location %q", c.path, c.answer,
							r.header.Get("Location"), r.header.Get("Content-Location"))
					}
				}
			}
		})
	}
}
