package httpidem_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// app is a counting business handler behind the middleware, on a real socket.
type app struct {
	t       *testing.T
	store   ledger.Store
	srv     *httptest.Server
	effects atomic.Int64
	// behave decides the response of each effect; default 201 with a ticket.
	behave func(w http.ResponseWriter, r *http.Request, n int64)
}

func newApp(t *testing.T, store ledger.Store, opts httpidem.Options) *app {
	a := &app{t: t, store: store}
	opts.Store = store
	opts.Tenant = func(r *http.Request) (string, error) {
		if t := r.Header.Get("X-Tenant"); t != "" {
			return t, nil
		}
		return "", errors.New("no tenant")
	}
	if opts.Routes == nil {
		opts.Routes = []httpidem.Route{{Method: "POST", Pattern: "/v1/tickets", Ignore: []string{"/client_time"}}}
	}
	opts.StatusBase = "/_idem/v1"
	m, err := httpidem.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tickets", func(w http.ResponseWriter, r *http.Request) {
		n := a.effects.Add(1)
		if a.behave != nil {
			a.behave(w, r, n)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"ticket":"T-%d","echo":%q}`, n, body)
	})
	mux.HandleFunc("GET /v1/tickets", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "list") })
	a.srv = httptest.NewUnstartedServer(m.Handler(mux))
	a.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test's panic is expected
	a.srv.Start()
	t.Cleanup(a.srv.Close)
	return a
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (a *app) post(key, tenant, body string, extra ...string) reply {
	a.t.Helper()
	req, _ := http.NewRequest("POST", a.srv.URL+"/v1/tickets", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant", tenant)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Add(extra[i], extra[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func problemCode(t *testing.T, r reply) string {
	t.Helper()
	if r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("status %d, not a problem: %q", r.status, r.body)
	}
	var p contract.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatal(err)
	}
	if p.Status != r.status || p.Type != "urn:idemgate:problem:"+p.Code || p.Title == "" || p.Detail == "" {
		t.Fatalf("malformed problem: %s", r.body)
	}
	return p.Code
}

func (a *app) operations() int {
	a.t.Helper()
	page, err := a.store.List(context.Background(), ledger.ListParams{})
	if err != nil {
		a.t.Fatal(err)
	}
	return len(page.Operations)
}

// forEachStore runs test on a new store of each kind.
func forEachStore(t *testing.T, test func(t *testing.T, s ledger.Store)) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) { test(t, db.Open(t, roomy)) })
}

func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{})
		first := a.post("k1", "acme", `{"title":"Disk full","client_time":"10:00"}`)
		if first.status != 201 || first.header.Get("Idempotency-Operation") == "" || first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first: %+v", first)
		}
		// Same meaning: reordered, respaced, and an ignored member changed.
		again := a.post("k1", "acme", `{ "client_time":"10:05", "title" : "Disk full" }`)
		if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" ||
			again.header.Get("Idempotency-Operation") != first.header.Get("Idempotency-Operation") ||
			again.header.Get("Content-Type") != "application/json" {
			t.Fatalf("replay %+v, first %+v", again, first)
		}
		if a.effects.Load() != 1 {
			t.Fatalf("%d effects", a.effects.Load())
		}
	})
}

func TestRefusedRequestsChangeNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{MaxBody: 1024})
		deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
		cases := []struct {
			name, key, tenant, body string
			extra                   []string
			status                  int
			code                    string
		}{
			{"no key", "", "acme", `{}`, nil, 400, "missing_key"},
			{"long key", strings.Repeat("k", 256), "acme", `{}`, nil, 400, "invalid_key"},
			{"non-ASCII key", "clé", "acme", `{}`, nil, 400, "invalid_key"},
			{"two keys", "a", "acme", `{}`, []string{"Idempotency-Key", "b"}, 400, "invalid_key"},
			{"no tenant", "k", "", `{}`, nil, 401, "unauthorized"},
			{"not JSON", "k", "acme", `title=x`, nil, 422, "invalid_command"},
			{"too large", "k", "acme", `{"x":"` + strings.Repeat("a", 2000) + `"}`, nil, 413, "payload_too_large"},
			{"too deep", "k", "acme", deep, nil, 422, "invalid_command"},
			{"duplicate member", "k", "acme", `{"a":1,"a":2}`, nil, 422, "invalid_command"},
			{"invalid UTF-8", "k", "acme", "{\"a\":\"\xff\"}", nil, 422, "invalid_command"},
			{"unsafe integer", "k", "acme", `{"amount_minor":9007199254740993}`, nil, 422, "invalid_command"},
		}
		for _, c := range cases {
			r := a.post(c.key, c.tenant, c.body, c.extra...)
			if r.status != c.status || problemCode(t, r) != c.code {
				t.Errorf("%s: %d %s", c.name, r.status, r.body)
			}
		}
		if a.effects.Load() != 0 || a.operations() != 0 {
			t.Fatalf("refusals reached the handler (%d) or reserved (%d)", a.effects.Load(), a.operations())
		}
		if r := a.post("k", "acme", `{"ok":true}`); r.status != 201 {
			t.Fatalf("the middleware stopped serving: %+v", r)
		}
	})
}

func TestChangedPayloadIsRefusedAndRevealsNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{})
		first := a.post("k", "acme", `{"title":"secret-payroll-export"}`)
		r := a.post("k", "acme", `{"title":"something else"}`)
		if r.status != 422 || problemCode(t, r) != "fingerprint_mismatch" {
			t.Fatalf("changed payload: %+v", r)
		}
		if strings.Contains(r.body, "secret") || strings.Contains(r.body, "T-1") ||
			r.header.Get("Idempotency-Operation") != first.header.Get("Idempotency-Operation") {
			t.Fatalf("the refusal reveals the first request: %s", r.body)
		}
		if a.effects.Load() != 1 {
			t.Fatalf("%d effects", a.effects.Load())
		}
	})
}

func TestTenantsAreSeparate(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{})
		x := a.post("same", "acme", `{"t":1}`)
		y := a.post("same", "globex", `{"t":1}`)
		if x.status != 201 || y.status != 201 || x.body == y.body || y.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("acme %+v globex %+v", x, y)
		}
		if a.effects.Load() != 2 {
			t.Fatalf("%d effects, want one per tenant", a.effects.Load())
		}
	})
}

func TestInProgressAndWait(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{})
		release := make(chan struct{})
		a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
			<-release
			w.WriteHeader(201)
			fmt.Fprintf(w, "T-%d", n)
		}
		done := make(chan reply)
		go func() { done <- a.post("k", "acme", `{}`) }()
		waitFor(t, func() bool { return a.effects.Load() == 1 })
		busy := a.post("k", "acme", `{}`)
		if busy.status != 409 || problemCode(t, busy) != "in_progress" || busy.header.Get("Retry-After") == "" {
			t.Fatalf("while running: %+v", busy)
		}
		waited := make(chan reply)
		go func() { waited <- a.post("k", "acme", `{}`, "Prefer", "respond-async, wait=5") }()
		time.Sleep(50 * time.Millisecond)
		close(release)
		first, w := <-done, <-waited
		if w.status != 201 || w.body != first.body || w.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("waited: %+v, first %+v", w, first)
		}
		if a.effects.Load() != 1 {
			t.Fatalf("%d effects", a.effects.Load())
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	if !until(cond) {
		t.Fatal("condition not met in 30s")
	}
}

// until waits for cond, at most 30s (a bound for a stuck test, not a
// window), and reports whether it held; a handler's goroutine, which must
// not call t.Fatal, uses it.
func until(cond func() bool) bool {
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func TestDuplicateStorm(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		for _, wait := range []bool{false, true} {
			a := newApp(t, s, httpidem.Options{})
			a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
				time.Sleep(50 * time.Millisecond)
				w.WriteHeader(201)
				fmt.Fprintf(w, "T-%d", n)
			}
			const n = 200
			key := fmt.Sprintf("storm-%v", wait)
			replies := make([]reply, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					var extra []string
					if wait {
						extra = []string{"Prefer", "wait=10"}
					}
					replies[i] = a.post(key, "acme", `{"title":"storm"}`, extra...)
				}()
			}
			close(start)
			wg.Wait()
			created, busy := 0, 0
			for _, r := range replies {
				switch {
				case r.status == 201 && r.body == "T-1":
					created++
				case r.status == 409 && !wait && problemCode(t, r) == "in_progress":
					busy++
				default:
					t.Fatalf("wait=%v: unexpected %+v", wait, r)
				}
			}
			if a.effects.Load() != 1 {
				t.Fatalf("wait=%v: %d effects from %d copies", wait, a.effects.Load(), n)
			}
			t.Logf("wait=%v: %d answers with the ticket, %d in progress", wait, created, busy)
		}
	})
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{})
		statuses := map[string]int{"refused": 422, "limited": 429, "broken": 500}
		var limitedOnce atomic.Bool
		a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
			status := statuses[r.Header.Get("Idempotency-Key")]
			if status == 429 && !limitedOnce.CompareAndSwap(false, true) {
				status = 201 // the rate limit has passed
			}
			if status == 429 {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(status)
			fmt.Fprintf(w, "attempt %d", n)
		}
		// A business refusal is final: stored and replayed.
		first := a.post("refused", "acme", `{}`)
		again := a.post("refused", "acme", `{}`)
		if first.status != 422 || again.status != 422 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("refusal: %+v then %+v", first, again)
		}
		// A rate limit is not an outcome: the operation is released and the
		// retry runs, once.
		limited := a.post("limited", "acme", `{}`)
		retried := a.post("limited", "acme", `{}`)
		if limited.status != 429 || limited.header.Get("Retry-After") != "1" || retried.status != 201 {
			t.Fatalf("rate limit: %+v then %+v", limited, retried)
		}
		// A 5xx may have done anything: unknown, and never run again.
		broken := a.post("broken", "acme", `{}`)
		after := a.post("broken", "acme", `{}`)
		if broken.status != 500 || after.status != 409 || problemCode(t, after) != "outcome_unknown" ||
			!strings.Contains(after.body, `"status_url":"/_idem/v1/operations/op_`) {
			t.Fatalf("5xx: %+v then %+v", broken, after)
		}
		if a.effects.Load() != 4 { // refused 1, limited 2, broken 1
			t.Fatalf("%d effects", a.effects.Load())
		}
	})
}

func TestPanicLeavesUnknown(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{})
		a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
			w.WriteHeader(201) // even after a status was written
			panic("boom")
		}
		req, _ := http.NewRequest("POST", a.srv.URL+"/v1/tickets", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "p")
		req.Header.Set("X-Tenant", "acme")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("a panicking handler answered %d", resp.StatusCode)
		}
		op, err := s.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "p"})
		if err != nil || op.State != ledger.Unknown || op.LastError != "effect_panic" {
			t.Fatalf("after a panic: %+v %v", op, err)
		}
		if r := a.post("p", "acme", `{}`); r.status != 409 || problemCode(t, r) != "outcome_unknown" {
			t.Fatalf("retry after a panic: %+v", r)
		}
	})
}

// An answer larger than MaxResponse reaches its client whole, streamed;
// the operation is final by its status, and keeps a stand-in that names
// the answer, which every retry is given (docs/design.md, "An answer too
// large to keep"): the effect is never run again, and never unknown.
func TestAnswerTooLargeIsKeptAsAStandIn(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{MaxResponse: 100})
		big := strings.Repeat("x", 1000)
		a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(201)
			io.WriteString(w, big)
		}
		if r := a.post("big", "acme", `{}`); r.status != 201 || r.body != big {
			t.Fatalf("a large answer must still reach its client: %d, %d bytes", r.status, len(r.body))
		}
		op, _ := s.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "big"})
		if op.State != ledger.Succeeded {
			t.Fatalf("large response: %s %s", op.State, op.LastError)
		}
		r := a.post("big", "acme", `{}`)
		var nk contract.NotKept
		sum := sha256.Sum256([]byte(big))
		if err := json.Unmarshal([]byte(r.body), &nk); err != nil || r.status != 201 ||
			r.header.Get(contract.HeaderAnswerNotKept) != "true" || r.header.Get(contract.HeaderReplayed) != "true" ||
			nk.Code != contract.CodeAnswerNotKept || nk.Size != 1000 || nk.SHA256 != hex.EncodeToString(sum[:]) ||
			nk.Limit != 100 || a.effects.Load() != 1 {
			t.Fatalf("the retry: %d %v %s (%d effects)", r.status, r.header, r.body, a.effects.Load())
		}
	})
}

// TestLeaseIsExtendedWhileTheHandlerRuns: a handler that runs past its
// first lease's end, with a sweeper busy all along, keeps its operation:
// the heartbeats extended the lease. The handler waits for that moment,
// not for a time; the lease is a second, so that two heartbeats in a row
// would have to be missed for it to lapse.
func TestLeaseIsExtendedWhileTheHandlerRuns(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{Routes: []httpidem.Route{
			{Method: "POST", Pattern: "/v1/tickets", Lease: time.Second}}})
		a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
			first := httpidem.Current(r).Lease()
			if !until(func() bool {
				op, err := s.Get(context.Background(), first.OpID)
				return err == nil && op.State == ledger.Executing && time.Now().After(first.Until) &&
					op.LeaseUntil.After(first.Until)
			}) {
				t.Error("the handler never ran past its first lease with the operation still its own")
			}
			w.WriteHeader(201)
		}
		stop := make(chan struct{})
		var sweeps sync.WaitGroup
		sweeps.Add(1)
		go func() { // a busy sweeper: any lapse would be caught
			defer sweeps.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
					s.ExpireLeases(context.Background(), 100)
				}
			}
		}()
		r := a.post("slow", "acme", `{}`)
		close(stop)
		sweeps.Wait()
		op, _ := s.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "slow"})
		if r.status != 201 || op.State != ledger.Succeeded {
			t.Fatalf("slow handler: %d, operation %s", r.status, op.State)
		}
	})
}

func TestClientGoneGetsReplay(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{})
		a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
			<-r.Context().Done() // the client gives up meanwhile
			w.WriteHeader(201)
			fmt.Fprintf(w, `{"ticket":"T-%d"}`, n)
		}
		impatient := &http.Client{Timeout: 50 * time.Millisecond}
		req, _ := http.NewRequest("POST", a.srv.URL+"/v1/tickets", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "gone")
		req.Header.Set("X-Tenant", "acme")
		if _, err := impatient.Do(req); err == nil {
			t.Fatal("the impatient client got an answer")
		}
		waitFor(t, func() bool {
			op, err := s.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
				Key: "gone"})
			return err == nil && op.State == ledger.Succeeded
		})
		if r := a.post("gone", "acme", `{}`); r.status != 201 || r.body != `{"ticket":"T-1"}` || a.effects.Load() != 1 {
			t.Fatalf("retry after the client left: %+v, %d effects", r, a.effects.Load())
		}
	})
}

func TestKeyFromAndPassThrough(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		no := false
		a := newApp(t, s, httpidem.Options{Routes: []httpidem.Route{
			{Method: "POST", Pattern: "/v1/tickets", KeyFrom: "body:/event/id"},
			{Method: "GET", Pattern: "/v1/tickets", RequireKey: &no},
		}})
		one := a.post("", "acme", `{"event":{"id":"alert-77"},"title":"db down"}`)
		two := a.post("", "acme", `{"event":{"id":"alert-77"},"title":"db down"}`)
		if one.status != 201 || two.body != one.body || two.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("key from body: %+v %+v", one, two)
		}
		if r := a.post("", "acme", `{"title":"no event id"}`); r.status != 400 || problemCode(t, r) != "missing_key" {
			t.Fatalf("no key in body: %+v", r)
		}
		resp, err := http.Get(a.srv.URL + "/v1/tickets")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(body, []byte("list")) || a.operations() != 1 {
			t.Fatalf("a keyless GET must pass through unrecorded: %d %q, %d operations", resp.StatusCode, body, a.operations())
		}
	})
}

func TestBusinessAndConcurrencyKeys(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/tickets",
			BusinessKey: "/source_event_id", ConcurrencyKey: "/environment"}}})
		release := make(chan struct{})
		a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
			if r.Header.Get("Idempotency-Key") == "deploy-1" {
				<-release
			}
			w.WriteHeader(201)
			fmt.Fprintf(w, "T-%d", n)
		}
		first := a.post("alert-a", "acme", `{"source_event_id":"evt-9","environment":"e1","title":"DB down"}`)
		dup := a.post("alert-b", "acme", `{"source_event_id":"evt-9","environment":"e1","title":"Database is down!"}`)
		if dup.status != 201 || dup.body != first.body || dup.header.Get("Idempotency-Duplicate-Of") !=
			first.header.Get("Idempotency-Operation") {
			t.Fatalf("duplicate alert: %+v, first %+v", dup, first)
		}
		done := make(chan reply)
		go func() { done <- a.post("deploy-1", "acme", `{"source_event_id":"d1","environment":"production"}`) }()
		waitFor(t, func() bool { return a.effects.Load() == 2 })
		locked := a.post("deploy-2", "acme", `{"source_event_id":"d2","environment":"production"}`)
		if locked.status != 409 || problemCode(t, locked) != "concurrency_locked" || !strings.Contains(locked.body, `"operation_id":"op_`) {
			t.Fatalf("second deployment to production: %+v", locked)
		}
		if locked.header.Get("Idempotency-Operation") != "" {
			t.Fatalf("the holder's id must not be given as this key's operation: %v", locked.header)
		}
		if r := a.post("deploy-4", "acme", `{"source_event_id":"d4"}`); r.status != 422 || problemCode(t, r) != "invalid_command" {
			t.Fatalf("a deployment without an environment must not escape the lock: %+v", r)
		}
		if r := a.post("deploy-3", "acme", `{"source_event_id":"d3","environment":"staging"}`); r.status != 201 {
			t.Fatalf("another environment: %+v", r)
		}
		close(release)
		<-done
		if r := a.post("deploy-2", "acme", `{"source_event_id":"d2","environment":"production"}`); r.status != 201 {
			t.Fatalf("after the first deployment ended: %+v", r)
		}
		// No business identity is not an error: that command is simply not
		// deduplicated by one (a ticket typed by hand has no source event).
		if r := a.post("manual-1", "acme", `{"environment":"e2","title":"by hand"}`); r.status != 201 ||
			r.header.Get("Idempotency-Duplicate-Of") != "" {
			t.Fatalf("a command without a business key: %+v", r)
		}
		if a.effects.Load() != 5 {
			t.Fatalf("%d effects", a.effects.Load())
		}
	})
}

// TestDigestKey: a route whose business key is its body's digest (a
// GitHub webhook's) makes one operation of one body, byte for byte,
// under any number of keys; another body, even one of the same meaning,
// is another operation. A route may not name both kinds of business key.
func TestDigestKey(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/tickets", DigestKey: true}}})
		first := a.post("delivery-1", "acme", `{"action":"opened","number":7}`)
		again := a.post("delivery-2", "acme", `{"action":"opened","number":7}`)
		if again.status != 201 || again.body != first.body || again.header.Get("Idempotency-Duplicate-Of") !=
			first.header.Get("Idempotency-Operation") {
			t.Fatalf("the same body under a new key: %+v, first %+v", again, first)
		}
		if r := a.post("delivery-3", "acme", `{"number":7,"action":"opened"}`); r.status != 201 ||
			r.header.Get("Idempotency-Duplicate-Of") != "" {
			t.Fatalf("another body: %+v", r)
		}
		if n := a.effects.Load(); n != 2 {
			t.Fatalf("%d effects for two bodies", n)
		}
		_, err := httpidem.New(httpidem.Options{Store: s, Tenant: func(*http.Request) (string, error) { return "t", nil },
			Routes: []httpidem.Route{{Method: "POST", Pattern: "/x", DigestKey: true, BusinessKey: "/id"}}})
		if err == nil || !strings.Contains(err.Error(), "a business key and the body's digest") {
			t.Fatalf("both business keys: %v", err)
		}
	})
}

// TestReplaysNeedNoStore: a final operation never changes, so this process
// replays it from memory; everything else still needs the store.
func TestReplaysNeedNoStore(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{})
		first := a.post("k", "acme", `{"title":"cached"}`)
		s.Close()
		again := a.post("k", "acme", `{"title":"cached"}`)
		if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay without a store: %+v", again)
		}
		if r := a.post("k", "acme", `{"title":"changed"}`); r.status != 422 || problemCode(t, r) != "fingerprint_mismatch" {
			t.Fatalf("changed payload without a store: %+v", r)
		}
		if r := a.post("k", "globex", `{"title":"cached"}`); r.status != 503 || problemCode(t, r) != "store_unavailable" {
			t.Fatalf("another tenant's key must not hit the cache: %+v", r)
		}
		if r := a.post("new", "acme", `{"title":"cached"}`); r.status != 503 || a.effects.Load() != 1 {
			t.Fatalf("a new key without a store: %+v, %d effects", r, a.effects.Load())
		}
	})
}

func TestFingerprintedHeadersAndKeyFromHeader(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/tickets",
			KeyFrom: "header:X-Delivery-Id", Headers: []string{"X-Region"}}}})
		eu := a.post("", "acme", `{}`, "X-Delivery-Id", "d-1", "X-Region", "eu")
		again := a.post("", "acme", `{}`, "X-Delivery-Id", "d-1", "X-Region", "eu", "X-Trace", "other")
		us := a.post("", "acme", `{}`, "X-Delivery-Id", "d-1", "X-Region", "us")
		if eu.status != 201 || again.header.Get("Idempotent-Replayed") != "true" || us.status != 422 ||
			problemCode(t, us) != "fingerprint_mismatch" || a.effects.Load() != 1 {
			t.Fatalf("eu %+v, again %+v, us %+v", eu, again, us)
		}
		if r := a.post("ignored-idempotency-key", "acme", `{}`); r.status != 400 || problemCode(t, r) != "missing_key" {
			t.Fatalf("without the delivery id: %+v", r)
		}
	})
}

// TestApprovalDeniedReplay: an operation whose approval was denied answers
// 403 approval_denied to every retry, and nothing is forwarded.
func TestApprovalDeniedReplay(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newApp(t, s, httpidem.Options{})
		cmd, _ := fingerprint.Parse([]byte(`{"environment":"production"}`), fingerprint.Limits{})
		fp, _ := fingerprint.Of(fingerprint.Request{Method: "POST", Route: "/v1/tickets", Tenant: "acme", Command: cmd})
		c := context.Background()
		r, err := s.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
			Tenant: "acme", Key: "deploy", Route: "POST /v1/tickets",
			Fingerprint: fp, Retention: time.Hour, Actor: "approvals", Approval: &ledger.ApprovalRequest{
				Target: "POST /v1/tickets", Command: []byte(`{"environment":"production"}`), RequestedBy: "agent",
				Approvers: []string{"approver"}, TTL: time.Hour, ValidFor: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Deny(c, ledger.DecisionParams{ApprovalID: r.Op.Approval.ID, Tenant: "acme", Fingerprint: fp,
			Actor: "alice", Roles: []string{"approver"}, Note: "not on a Friday"}); err != nil {
			t.Fatal(err)
		}
		got := a.post("deploy", "acme", `{"environment":"production"}`)
		if got.status != 403 || problemCode(t, got) != "approval_denied" || a.effects.Load() != 0 {
			t.Fatalf("denied: %+v", got)
		}
	})
}
