package webui_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/webui"
)

// fixture is the web page on a real socket over a real SQLite store, with
// the idempotency middleware in front of a counting upstream on the same
// server: agents call the API with bearer tokens, people use /ui/ with the
// same principals' tokens, as behind the gateway.
type fixture struct {
	t       *testing.T
	store   ledger.Store
	srv     *httptest.Server
	sealer  *audit.Sealer
	log     *syncBuffer
	tokens  map[string]string // principal name → token
	seen    *recorder         // every /ui/ exchange, for the token check
	deploys atomic.Int64      // effects at the upstream
	charges atomic.Int64
	refunds atomic.Int64
}

// principals of the fixture: two tenants; dana is an approver who also
// requests deployments (the requester who may not decide her own).
var principals = []approval.Principal{
	{Name: "bot", Tenant: "acme", Roles: []string{"agent"}},
	{Name: "alice", Tenant: "acme", Roles: []string{"approver", "admin"}},
	{Name: "dana", Tenant: "acme", Roles: []string{"approver", "agent"}},
	{Name: "gina", Tenant: "globex", Roles: []string{"approver", "admin"}},
}

func newFixture(t *testing.T, opts ...func(*webui.Options)) *fixture {
	t.Helper()
	fx := &fixture{t: t, log: &syncBuffer{}, tokens: map[string]string{}, seen: &recorder{}}
	fx.store = dbtest.SQLite(t)
	fx.sealer = newSealer(t, fx.store)
	hashes := map[string][]byte{}
	for _, p := range principals {
		tok := randomToken()
		fx.tokens[p.Name] = tok
		sum := sha256.Sum256([]byte(tok))
		hashes[p.Name] = sum[:]
	}
	authenticate := func(token string) (approval.Principal, bool) {
		sum := sha256.Sum256([]byte(token))
		var found approval.Principal
		ok := false
		for _, p := range principals {
			if subtle.ConstantTimeCompare(sum[:], hashes[p.Name]) == 1 {
				found, ok = p, true
			}
		}
		return found, ok
	}
	logger := slog.New(slog.NewJSONHandler(fx.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o := webui.Options{Store: fx.store, Operator: &control.Operator{Store: fx.store}, Authenticate: func(_ *http.Request, token string) (webui.SignIn, bool) {
		p, ok := authenticate(token)
		return webui.SignIn{Principal: p}, ok
	},
		Logger: logger, Amounts: map[string][]webui.Amount{"POST /v1/refunds": {{Pointer: "/amount_minor", Currency: "/currency"}}}}
	for _, f := range opts {
		f(&o)
	}
	ui, err := webui.New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", fx.seen.wrap(ui))
	mux.Handle("/", fx.api(authenticate, logger))
	fx.srv = httptest.NewServer(mux)
	t.Cleanup(fx.srv.Close)
	return fx
}

// newSealer signs a checkpoint after every event, so that a sealed event
// is proven at once.
func newSealer(t *testing.T, s ledger.Store) *audit.Sealer {
	t.Helper()
	key := filepath.Join(t.TempDir(), "audit.key")
	if _, err := audit.Keygen(key, "idemgate-ui-test"); err != nil {
		t.Fatal(err)
	}
	sg, err := audit.LoadSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	return &audit.Sealer{Log: s, Signing: audit.Signing{Signer: sg, Name: "idemgate-ui-test", Every: 1}}
}

// seal seals every audit event written so far.
func (fx *fixture) seal() {
	fx.t.Helper()
	for {
		n, err := fx.sealer.Round(context.Background())
		if err != nil {
			fx.t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

// api is the agents' side: the middleware in front of a deployment route
// whose production deployments need an approver, and a capture route
// whose upstream answers 502 the first time (the outcome is then unknown).
func (fx *fixture) api(authenticate func(string) (approval.Principal, bool), logger *slog.Logger) http.Handler {
	pol, err := approval.Compile(approval.Config{When: `body.environment == "production"`, TTL: time.Hour,
		Summary: `Deploy {{.body.artifact}} to {{.body.environment}} ({{.params.service}})`})
	if err != nil {
		fx.t.Fatal(err)
	}
	always, err := approval.Compile(approval.Config{TTL: time.Hour, Reversible: true,
		Summary: `Refund {{.body.amount_minor}} (minor units) {{.body.currency}} on {{.body.order}}`})
	if err != nil {
		fx.t.Fatal(err)
	}
	release, err := approval.Compile(approval.Config{TTL: time.Hour, Summary: `Release {{.body.v}} to {{.body.environment}}`})
	if err != nil {
		fx.t.Fatal(err)
	}
	principal := func(r *http.Request) (approval.Principal, error) {
		if p, ok := authenticate(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")); ok {
			return p, nil
		}
		return approval.Principal{}, fmt.Errorf("no principal")
	}
	m, err := httpidem.New(httpidem.Options{Store: fx.store, StatusBase: "/_idem/v1", Principal: principal, Logger: logger,
		Audit:  auditRecorder{fx},
		Tenant: func(r *http.Request) (string, error) { p, err := principal(r); return p.Tenant, err },
		Routes: []httpidem.Route{
			{Method: "POST", Pattern: "/v1/services/{service}/deployments", Approval: pol, ResultRef: "body:/deployment"},
			{Method: "POST", Pattern: "/v1/payment-intents/{id}/capture", ResultRef: "body:/id",
				Probe: func(params map[string]string, _ map[string][]string, _ any) (string, error) {
					return "GET /v1/payment-intents/" + params["id"], nil
				}},
			{Method: "POST", Pattern: "/v1/refunds", Approval: always, ResultRef: "body:/id"},
			{Method: "POST", Pattern: "/v1/releases", Approval: release, ConcurrencyKey: "/environment"},
		}})
	if err != nil {
		fx.t.Fatal(err)
	}
	up := http.NewServeMux()
	up.HandleFunc("POST /v1/services/{service}/deployments", func(w http.ResponseWriter, r *http.Request) {
		n := fx.deploys.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"deployment":"D-%d"}`, n)
	})
	up.HandleFunc("POST /v1/refunds", func(w http.ResponseWriter, r *http.Request) {
		fx.refunds.Add(1)
		http.Error(w, "upstream timed out", http.StatusBadGateway) // refunded or not: nobody knows
	})
	up.HandleFunc("POST /v1/payment-intents/{id}/capture", func(w http.ResponseWriter, r *http.Request) {
		fx.charges.Add(1)
		http.Error(w, "upstream timed out", http.StatusBadGateway) // captured or not: nobody knows
	})
	return m.Handler(up)
}

// auditRecorder writes the audit events that record no transition (a
// conflict, a refusal for a held concurrency group, a replay) at once, so
// that a page opened next shows them.
type auditRecorder struct{ fx *fixture }

func (r auditRecorder) Record(e audit.Event) {
	if err := r.fx.store.RecordEvents(context.Background(), []audit.Event{e}); err != nil {
		r.fx.t.Errorf("record %s: %v", e.Kind, err)
	}
}

// reply is an API answer.
type reply struct {
	status int
	header http.Header
	body   string
}

// call sends a request to the API as the named principal, with the extra
// headers given as name, value pairs.
func (fx *fixture) call(who, method, path, key, body string, headers ...string) reply {
	fx.t.Helper()
	req, _ := http.NewRequest(method, fx.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fx.tokens[who])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fx.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// deploy asks for a deployment as who, and returns its pending approval.
func (fx *fixture) deploy(who, key, body string) *ledger.Approval {
	fx.t.Helper()
	return fx.pending(fx.call(who, "POST", "/v1/services/api/deployments", key, body))
}

// refund asks for a refund as who, and returns its pending approval: every
// refund needs one, and its upstream's answer is lost (502).
func (fx *fixture) refund(who, key, body string) *ledger.Approval {
	fx.t.Helper()
	return fx.pending(fx.call(who, "POST", "/v1/refunds", key, body))
}

// pending reads the approval a 202 names.
func (fx *fixture) pending(r reply) *ledger.Approval {
	fx.t.Helper()
	var acc contract.Accepted
	if r.status != http.StatusAccepted || json.Unmarshal([]byte(r.body), &acc) != nil {
		fx.t.Fatalf("deploy: want 202 with an approval, got %d %s", r.status, r.body)
	}
	a, err := fx.store.GetApproval(context.Background(), acc.Approval.ID)
	if err != nil {
		fx.t.Fatal(err)
	}
	return a
}

func (fx *fixture) approval(id string) *ledger.Approval {
	fx.t.Helper()
	a, err := fx.store.GetApproval(context.Background(), id)
	if err != nil {
		fx.t.Fatal(err)
	}
	return a
}

func (fx *fixture) operation(id string) *ledger.Operation {
	fx.t.Helper()
	op, err := fx.store.Get(context.Background(), id)
	if err != nil {
		fx.t.Fatal(err)
	}
	return op
}

// checkNoToken fails if any principal's token is in a page, a URL or the
// log.
func (fx *fixture) checkNoToken(t *testing.T) {
	t.Helper()
	pages, urls := fx.seen.all()
	if len(pages) == 0 {
		t.Fatal("no page was recorded")
	}
	for name, tok := range fx.tokens {
		for i, p := range pages {
			if strings.Contains(p, tok) {
				t.Errorf("%s's token is in the page answered to %s", name, urls[i])
			}
		}
		for _, u := range urls {
			if strings.Contains(u, tok) {
				t.Errorf("%s's token is in the URL %s", name, u)
			}
		}
		if strings.Contains(fx.log.String(), tok) {
			t.Errorf("%s's token is in the log", name)
		}
	}
}

func randomToken() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "tok_" + hex.EncodeToString(b[:])
}

// recorder keeps every /ui/ request's URL and its answer's body.
type recorder struct {
	mu    sync.Mutex
	pages []string
	urls  []string
}

func (rec *recorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &captureWriter{ResponseWriter: w}
		next.ServeHTTP(cw, r)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.pages = append(rec.pages, cw.buf.String()+strings.Join(cw.Header().Values("Location"), " "))
		rec.urls = append(rec.urls, r.URL.String())
	})
}

func (rec *recorder) all() ([]string, []string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.pages...), append([]string(nil), rec.urls...)
}

type captureWriter struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (c *captureWriter) Write(b []byte) (int, error) {
	c.buf.Write(b)
	return c.ResponseWriter.Write(b)
}

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// prod is a production deployment of an immutable artifact.
const prod = `{"artifact":"api@sha256:4f2a9c","environment":"production"}`
