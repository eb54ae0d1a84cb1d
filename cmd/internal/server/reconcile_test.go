package server_test

import (
	"context"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// probeRoutes are routes whose lost answers a probe settles.
const probeRoutes = `  - match: POST /v1/lost/probed
    upstream: ops
    result_ref: body:/id
    reconcile: {probe: 'GET /v1/effects?path={{.body.path}}', applied: 'status == 200 && body.count >= 1',
                not_applied: 'status == 200 && body.count == 0', every: 1ms}
  - match: POST /v1/dropped/probed
    upstream: ops
    reconcile: {probe: 'GET /v1/effects?path={{.body.path}}', applied: 'body.count >= 1',
                not_applied: 'body.count == 0', every: 1ms}
  - match: POST /v1/failing/probed
    upstream: ops
    reconcile: {probe: 'GET /v1/effects?path=x&fail=1', applied: 'status == 200', not_applied: 'false',
                every: 1ms, give_up_after: 300ms}
`

// TestReconcileFromProof: a capture whose answer was lost is probed and
// found applied: succeeded, the probe's answer replayed, marked
// reconciled, never sent twice; one the probe proves not applied is
// released, and the retry runs it once; a probe that proves nothing
// leaves it unknown, probed again later, until it gives up and waits for
// an operator. Each verdict, with its evidence, is in the history. Not in
// parallel: it paces the probes with sleeps of 5 to 350ms.
func TestReconcileFromProof(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		store, dsn := db.Open(t), db.DSN
		e := newEnv(t, store, dsn, probeRoutes)
		r := e.g.Reconciler()
		once := func() int {
			n, err := r.Once(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		post := func(path, key, body string) reply {
			return e.do("POST", path, "agent-token", body, "Idempotency-Key", key)
		}
		lost := post("/v1/lost/probed", "p-1", `{"path":"/v1/lost/probed"}`)
		dropped := post("/v1/dropped/probed", "p-2", `{"path":"/v1/dropped/probed"}`)
		failing := post("/v1/failing/probed", "p-3", `{}`)
		for _, r := range []reply{lost, dropped, failing} {
			if r.status/100 != 5 {
				t.Fatalf("a lost answer: %d %s", r.status, r.body)
			}
		}
		if n := once(); n != 2 {
			t.Fatalf("settled %d, want 2", n)
		}
		replay := post("/v1/lost/probed", "p-1", `{"path":"/v1/lost/probed"}`)
		if replay.status != 200 || replay.header.Get("Idempotency-Reconciled") != "true" ||
			replay.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(replay.body, `"count":1`) {
			t.Fatalf("the retry after the proof: %d %v %s", replay.status, replay.header, replay.body)
		}
		if e.up.count("/v1/lost/probed") != 1 {
			t.Fatalf("the capture was sent %d times", e.up.count("/v1/lost/probed"))
		}
		op, _ := store.Get(context.Background(), lost.header.Get("Idempotency-Operation"))
		h, _ := store.History(context.Background(), op.ID)
		if op.State != ledger.Succeeded || op.ResultRef != "E-1" || h[len(h)-1].Actor != ledger.ActorReconciler ||
			!strings.Contains(h[len(h)-1].Reason, "answered 200: applied") {
			t.Fatalf("the reconciled operation: %+v %+v", op, h[len(h)-1])
		}
		if again := post("/v1/dropped/probed", "p-2", `{"path":"/v1/dropped/probed"}`); again.status/100 != 5 ||
			e.up.count("/v1/dropped/probed") != 0 {
			t.Fatalf("the retry of the proven-unapplied one: %d", again.status)
		}
		failingOp := failing.header.Get("Idempotency-Operation")
		time.Sleep(5 * time.Millisecond)
		once() // inconclusive: due again after its backoff
		time.Sleep(350 * time.Millisecond)
		once() // past give_up_after: it waits for an operator
		time.Sleep(50 * time.Millisecond)
		if n := once(); n != 0 {
			t.Fatalf("settled %d after giving up", n)
		}
		op, _ = store.Get(context.Background(), failingOp)
		if op.State != ledger.Unknown {
			t.Fatalf("an inconclusive probe moved it: %s", op.State)
		}
		cs, err := store.ClaimProbes(context.Background(), ledger.ProbeClaimParams{
			Routes: []string{"POST /v1/failing/probed"}, Limit: 10, Lease: time.Minute})
		if err != nil || len(cs) != 0 {
			t.Fatalf("given up, it was claimed again: %+v %v", cs, err)
		}
	})
}

// resolvingUpstream plays an upstream that resolves dot segments itself
// (as many frameworks do) and keeps an internal document next to its
// refunds; it answers every refund with 500, so that each one is unknown.
type resolvingUpstream struct {
	mu   sync.Mutex
	seen []string // every probe, as its request line named it
}

func (u *resolvingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		w.WriteHeader(500)
		return
	}
	u.mu.Lock()
	u.seen = append(u.seen, r.RequestURI)
	u.mu.Unlock()
	switch p := path.Clean(r.URL.Path); {
	case p == "/internal/payroll":
		_, _ = io.WriteString(w, `{"salaries":"secret"}`)
	case p == "/v1/refunds/R-1/status" && r.URL.RawQuery == "order=o1":
		_, _ = io.WriteString(w, `{"status":"refunded"}`)
	default:
		w.WriteHeader(404)
	}
}

func (u *resolvingUpstream) probes() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen)
}

// TestProbeValuesCannotSteerTheProbe (issue 24, 7.1): a field of the
// write names one record, never another path or query of the upstream.
// An object (whose keys a template would print raw), a dot segment or an
// empty value leaves no probe (the operation waits for an operator, and
// the log says why without the value); a value with "/", "?" or "&" is
// escaped in its place.
func TestProbeValuesCannotSteerTheProbe(t *testing.T) {
	routes := `  - match: POST /v1/refunds
    upstream: bare
    reconcile: {probe: 'GET /v1/refunds/{{.body.ref}}/status?order={{.body.order}}', applied: 'status == 200',
                not_applied: 'status == 404', every: 1ms}
`
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		up := &resolvingUpstream{}
		e := newEnvWith(t, db.Open(t), db.DSN, routes, up)
		refused := map[string]string{
			"map-dots":  `{"ref":{"/../../../internal/payroll?x=":1},"order":"o1"}`,
			"map-query": `{"ref":{"R-1/status?order=VICTIM&x=":1},"order":"o1"}`,
			"dot-dot":   `{"ref":"..","order":"o1"}`,
		}
		for key, body := range refused {
			if r := e.do("POST", "/v1/refunds", "agent-token", body, "Idempotency-Key", key); r.status != 500 {
				t.Fatalf("%s: %d %s", key, r.status, r.body)
			}
		}
		e.do("POST", "/v1/refunds", "agent-token", `{"ref":"R-1/status?order=VICTIM&x=","order":"o1"}`, "Idempotency-Key", "escaped")
		e.do("POST", "/v1/refunds", "agent-token", `{"ref":"R-1","order":"o1"}`, "Idempotency-Key", "honest")
		if _, err := e.g.Reconciler().Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := []string{"/v1/refunds/R-1%2Fstatus%3Forder%3DVICTIM%26x%3D/status?order=o1", "/v1/refunds/R-1/status?order=o1"}
		if got := up.probes(); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
			t.Fatalf("the upstream was probed with %q, want %q", got, want)
		}
		for key := range refused {
			op, _ := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
				Key: key})
			if op.State != ledger.Unknown || op.Probe != "" {
				t.Errorf("%s: %s, probe %q", key, op.State, op.Probe)
			}
		}
		if op, _ := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: "honest"}); op.State != ledger.Succeeded {
			t.Fatalf("the honest refund: %s", op.State)
		}
		logs := e.logs.String()
		if !strings.Contains(logs, "is an object") || !strings.Contains(logs, "is a dot segment") ||
			strings.Contains(logs, "payroll") || strings.Contains(logs, "VICTIM") {
			t.Fatalf("the log must say why, never with the value: %s", logs)
		}
	})
}
