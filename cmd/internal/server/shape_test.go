package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The error shapes (docs/design.md, "Error shapes"): an upstream whose
// clients read errors of their own form gets every refusal on its routes
// in that form, with the contract's status and headers.

// stripeAPI plays Stripe's API: customers (v1, forms) and event
// destinations (v2, JSON). A body naming "lost" is applied, and its answer
// lost on the way back. Effects are counted by path.
type stripeAPI struct {
	srv     *httptest.Server
	mu      sync.Mutex
	effects map[string]int
}

func newStripeAPI(t *testing.T) *stripeAPI {
	a := &stripeAPI{effects: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/customers", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		a.answer(w, r, "cus", r.PostForm.Get("email"), "customer")
	})
	mux.HandleFunc("POST /v2/core/event_destinations", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Name string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		a.answer(w, r, "ed", body.Name, "v2.core.event_destination")
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// answer makes the effect, then answers it, or loses its answer.
func (a *stripeAPI) answer(w http.ResponseWriter, r *http.Request, prefix, name, object string) {
	a.mu.Lock()
	a.effects[r.URL.Path]++
	n := a.effects[r.URL.Path]
	a.mu.Unlock()
	if strings.Contains(name, "lost") {
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"%s_%d","object":%q}`, prefix, n, object)
}

func (a *stripeAPI) count(path string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.effects[path]
}

// shapedGateway serves a gateway whose upstream "api" has the given
// errors setting, with customers, event destinations and refunds (for
// admins only) routed to it.
func shapedGateway(t *testing.T, upstream, errors string) *httptest.Server {
	t.Helper()
	db := dbtest.SQLiteDB(t)
	text := fmt.Sprintf(`store: %s
upstreams:
  api:
    url: %s
    forward_key: true
    errors: %s
principals:
  - {name: app, tenant: acme, roles: [agent], token_sha256: %s}
  - {name: slow, tenant: slow, roles: [agent], token_sha256: %s}
limits: {tenants: {slow: {rate: 1/h, burst: 1}}}
routes:
  - {match: POST /v1/customers, upstream: api}
  - {match: POST /v2/core/event_destinations, upstream: api}
  - {match: POST /v1/refunds, upstream: api, roles: [admin]}
`, db.DSN, upstream, errors, sha("sk_test_app"), sha("sk_test_slow"))
	cfg, err := config.Parse("gw.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	g, err := server.New(cfg, db.Open(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g.Handler())
	t.Cleanup(gw.Close)
	return gw
}

// stripeSDK returns node and the directory where Stripe's Node SDK is
// installed (make test's .ci/setup runs npm ci there). Without them the test skips,
// and under CI=true it fails.
func stripeSDK(t *testing.T) (node, dir string) {
	t.Helper()
	dir, _ = filepath.Abs(filepath.Join("testdata", "stripe"))
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "node_modules", "stripe", "package.json"))
	}
	if err != nil {
		msg := fmt.Sprintf("Stripe's Node SDK is not installed (node, and npm ci in %s): %v", dir, err)
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return node, dir
}

// sdkLine is what the SDK gave the application for one call.
type sdkLine struct {
	Name            string
	Raised          bool
	ID              string
	Class           string
	RawType         string
	Code            string
	Status          int
	OperationID     string `json:"operation_id"`
	State           string
	StatusURL       string `json:"status_url"`
	HeaderOperation string `json:"header_operation"`
}

// TestStripeSDKRaisesOnRefusals: Stripe's official Node SDK, through a
// gateway whose upstream declares errors: stripe, raises on every
// refusal (a changed parameter, an unknown outcome, a bad token, a
// missing role, a path no route serves) instead of returning it as the
// created object; an idempotency refusal carries type idempotency_error
// and Stripe's status for it, 400, so that both SDK versions raise
// StripeIdempotencyError (v1 picks its class by status), with the
// idemgate code and the operation it is about.
func TestStripeSDKRaisesOnRefusals(t *testing.T) {
	t.Parallel()
	node, dir := stripeSDK(t)
	api := newStripeAPI(t)
	gw := shapedGateway(t, api.srv.URL, "stripe")
	cmd := exec.Command(node, "sdk.mjs", gw.URL, "sk_test_app")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node sdk.mjs: %v\n%s", err, out)
	}
	got := map[string]sdkLine{}
	for _, text := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var l sdkLine
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		got[l.Name] = l
	}
	for name, want := range map[string]sdkLine{
		"v1 create": {ID: "cus_1"},
		"v1 replay": {ID: "cus_1"},
		// Stripe answers 400 for idempotency_error, and its v1 SDK raises
		// StripeIdempotencyError only then (issue 34, item 22).
		"v1 changed":    {Raised: true, Class: "StripeIdempotencyError", RawType: "idempotency_error", Code: "fingerprint_mismatch", Status: 400},
		"v1 lost":       {Raised: true, Class: "StripeIdempotencyError", RawType: "idempotency_error", Code: "outcome_unknown", Status: 400, State: "unknown"},
		"v1 lost again": {Raised: true, Class: "StripeIdempotencyError", RawType: "idempotency_error", Code: "outcome_unknown", Status: 400, State: "unknown"},
		"v2 create":     {ID: "ed_1"},
		"v2 changed":    {Raised: true, Class: "StripeIdempotencyError", RawType: "idempotency_error", Code: "fingerprint_mismatch", Status: 400},
		"v2 lost":       {Raised: true, Class: "StripeIdempotencyError", RawType: "idempotency_error", Code: "outcome_unknown", Status: 400, State: "unknown"},
		"v2 lost again": {Raised: true, Class: "StripeIdempotencyError", RawType: "idempotency_error", Code: "outcome_unknown", Status: 400, State: "unknown"},
		"bad token":     {Raised: true, Class: "StripeAuthenticationError", RawType: "invalid_request_error", Code: "unauthorized", Status: 401},
		"no role":       {Raised: true, Class: "StripePermissionError", RawType: "invalid_request_error", Code: "forbidden", Status: 403},
		"no route":      {Raised: true, Class: "StripeInvalidRequestError", RawType: "invalid_request_error", Code: "not_found", Status: 404},
	} {
		checkSDKLine(t, name, got[name], want)
	}
	// One effect per key: the SDK's own retries never made a second.
	if n, m := api.count("/v1/customers"), api.count("/v2/core/event_destinations"); n != 2 || m != 2 {
		t.Fatalf("effects: %d customers, %d event destinations; want 2 and 2", n, m)
	}
}

// checkSDKLine compares what the SDK did with what it should have; an
// idempotency refusal names its operation in the body and the headers.
func checkSDKLine(t *testing.T, name string, got, want sdkLine) {
	t.Helper()
	if got.Name == "" {
		t.Errorf("%s: no line from the script", name)
		return
	}
	idem := want.RawType == "idempotency_error"
	if got.Raised != want.Raised || got.ID != want.ID || got.Class != want.Class || got.RawType != want.RawType ||
		got.Code != want.Code || got.Status != want.Status || (want.State != "" && got.State != want.State) ||
		idem && (got.OperationID == "" || got.OperationID != got.HeaderOperation ||
			got.StatusURL != "/_idem/v1/operations/"+got.OperationID) {
		t.Errorf("%s: the SDK gave %+v, want %+v", name, got, want)
	}
}

// jsonAPI is a template of the JSON:API's error document.
const jsonAPI = `{template: '{"errors":[{"status":"{{.Status}}","code":{{json .Code}},"detail":{{json .Detail}}` +
	`{{if .OperationID}},"meta":{"operation_id":{{json .OperationID}}}{{end}}}]}', media_type: application/vnd.api+json}`

// shapeReader reads the code and the operation of a refusal in a shape.
type shapeReader struct {
	media string
	read  func(body []byte) (code, op string)
}

var shapeReaders = map[string]shapeReader{
	"problem": {"application/problem+json", func(b []byte) (string, string) {
		var v struct {
			Code        string
			OperationID string `json:"operation_id"`
		}
		_ = json.Unmarshal(b, &v)
		return v.Code, v.OperationID
	}},
	"stripe": {"application/json", func(b []byte) (string, string) {
		var v struct {
			Error struct {
				Type, Code  string
				OperationID string `json:"operation_id"`
			}
		}
		if json.Unmarshal(b, &v) != nil || v.Error.Type == "" {
			return "", ""
		}
		return v.Error.Code, v.Error.OperationID
	}},
	jsonAPI: {"application/vnd.api+json", func(b []byte) (string, string) {
		var v struct {
			Errors []struct {
				Code string
				Meta struct {
					OperationID string `json:"operation_id"`
				}
			}
		}
		if json.Unmarshal(b, &v) != nil || len(v.Errors) != 1 {
			return "", ""
		}
		return v.Errors[0].Code, v.Errors[0].Meta.OperationID
	}},
}

// TestErrorShapes: on an upstream with each errors setting, every
// refusal (the idempotency layer's and the gateway's own) is written in
// that shape, with the contract's status, and the operation it names,
// its state and its status resource in headers; a path that shares
// nothing with the upstream's routes keeps RFC 9457's shape.
func TestErrorShapes(t *testing.T) {
	t.Parallel()
	for setting, reader := range shapeReaders {
		t.Run(strings.Fields(setting)[0], func(t *testing.T) {
			t.Parallel()
			gw := shapedGateway(t, newStripeAPI(t).srv.URL, setting)
			send := func(method, path, token, key, body string) *http.Response {
				req, _ := http.NewRequest(method, gw.URL+path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Authorization", "Bearer "+token)
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			if r := send("POST", "/v1/customers", "sk_test_app", "k1", "email=a"); r.StatusCode != 200 {
				t.Fatalf("create: %d %s", r.StatusCode, readAll(t, r))
			}
			send("POST", "/v1/customers", "sk_test_slow", "s1", "email=s").Body.Close()
			for _, c := range []struct {
				name, method, path, token, key, body, code, state string
				status                                            int
				media                                             string
			}{
				{"changed", "POST", "/v1/customers", "sk_test_app", "k1", "email=b", "fingerprint_mismatch", "succeeded", 422, reader.media},
				{"lost", "POST", "/v1/customers", "sk_test_app", "k2", "email=lost", "outcome_unknown", "unknown", 502, reader.media},
				{"lost again", "POST", "/v1/customers", "sk_test_app", "k2", "email=lost", "outcome_unknown", "unknown", 409, reader.media},
				{"bad token", "POST", "/v1/customers", "sk_wrong", "k3", "email=c", "unauthorized", "", 401, reader.media},
				{"no role", "POST", "/v1/refunds", "sk_test_app", "k4", "charge=ch_1", "forbidden", "", 403, reader.media},
				{"over the rate", "POST", "/v1/customers", "sk_test_slow", "s2", "email=t", "rate_limited", "", 429, reader.media},
				{"no route", "GET", "/v1/customers/cus_1", "sk_test_app", "", "", "not_found", "", 404, reader.media},
				{"nothing shared", "GET", "/elsewhere", "sk_test_app", "", "", "not_found", "", 404, "application/problem+json"},
			} {
				r := send(c.method, c.path, c.token, c.key, c.body)
				body := readAll(t, r)
				read := reader.read
				if c.media == "application/problem+json" {
					read = shapeReaders["problem"].read
				}
				code, op := read([]byte(body))
				h := r.Header
				if setting == "stripe" && (c.code == "fingerprint_mismatch" || c.code == "outcome_unknown") {
					c.status = 400 // Stripe's status for an idempotency_error its SDKs raise on
				}
				if r.StatusCode != c.status || h.Get("Content-Type") != c.media || code != c.code ||
					h.Get("Idempotency-Operation") != op || h.Get("Idempotency-Operation-State") != c.state ||
					(c.state != "") != (op != "" && h.Get("Idempotency-Status-URL") == "/_idem/v1/operations/"+op) {
					t.Errorf("%s: %d %v %s", c.name, r.StatusCode, h, body)
				}
			}
		})
	}
}

// readAll reads an answer's body.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
