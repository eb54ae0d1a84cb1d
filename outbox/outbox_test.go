package outbox_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/outbox"
)

// honouring is a target that applies each key once, as a target that
// honours idempotency keys does: a repeat gets the first answer. It
// counts applications (the effects) and deliveries, and the most
// deliveries of one key in flight at once.
type honouring struct {
	mu        sync.Mutex
	applied   map[string]int // key → effects
	delivered map[string]int // key → deliveries
	inFlight  map[string]int
	maxFlight int
	order     []string // keys in the order first applied
	header    []http.Header
	behave    func(key string, n int) int // status for the n-th delivery of key (0: 201; lost)
	hold      time.Duration
}

// lost, as behave's status, applies the delivery and cuts the connection
// before any answer.
const lost = -1

func newHonouring() *honouring {
	return &honouring{applied: map[string]int{}, delivered: map[string]int{}, inFlight: map[string]int{}}
}

func (h *honouring) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	_, _ = io.ReadAll(r.Body)
	h.mu.Lock()
	h.delivered[key]++
	n := h.delivered[key]
	h.inFlight[key]++
	h.maxFlight = max(h.maxFlight, h.inFlight[key])
	h.header = append(h.header, r.Header.Clone())
	status := 0
	if h.behave != nil {
		status = h.behave(key, n)
	}
	h.mu.Unlock()
	time.Sleep(h.hold)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inFlight[key]--
	if status != 0 && status != 201 && status != lost {
		w.WriteHeader(status)
		return
	}
	if h.applied[key] == 0 {
		h.order = append(h.order, key)
	}
	h.applied[key] = 1
	if status == lost { // applied; the answer never reaches the relay
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(201)
	fmt.Fprintf(w, `{"id":"ref-%d"}`, len(h.order))
}

func (h *honouring) counts() (applied, delivered map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, d := map[string]int{}, map[string]int{}
	for k, v := range h.applied {
		a[k] = v
	}
	for k, v := range h.delivered {
		d[k] = v
	}
	return a, d
}

func serve(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// effects returns n effects of one new operation of tenant acme, to
// target "crm".
func effects(opKey string, n int) []outbox.Effect {
	out := make([]outbox.Effect, n)
	for i := range out {
		out[i] = outbox.Effect{Tenant: "acme", OperationKey: opKey, Name: fmt.Sprintf("step-%d", i+1), Target: "crm",
			Path: fmt.Sprintf("/v1/steps/%d", i+1), Header: http.Header{"Content-Type": {"application/json"}},
			Body: []byte(fmt.Sprintf(`{"step":%d}`, i+1))}
	}
	return out
}

// relay is a relay of target "crm" at url, fast to retry.
func relay(s ledger.Store, url string) *outbox.Relay {
	return &outbox.Relay{Store: s, Targets: map[string]outbox.Target{"crm": {URL: url, Timeout: 2 * time.Second,
		Header: http.Header{"Authorization": {"Bearer crm-secret"}}, ResultRef: "body:/id"}},
		Lease: 5 * time.Second, Every: 10 * time.Millisecond, Backoff: func(int) time.Duration { return 0 }}
}

// drain runs rounds until three in a row claim nothing. (An effect due
// "now" by the relay's clock may be due a millisecond later by SQLite's,
// which counts in milliseconds.)
func drain(t *testing.T, r *outbox.Relay) outbox.Round {
	var total outbox.Round
	for idle := 0; idle < 3; {
		round, err := r.Once(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if round.Claimed == 0 {
			idle++
			time.Sleep(5 * time.Millisecond)
			continue
		}
		idle, total = 0, total.Plus(round)
	}
	return total
}

func effectsOf(t *testing.T, s ledger.Store, opKey string) []*ledger.Effect {
	es, err := s.Effects(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients, Key: opKey})
	if err != nil {
		t.Fatal(err)
	}
	return es
}
