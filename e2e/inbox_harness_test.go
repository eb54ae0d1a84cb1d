package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// invoices is the consumers' upstream: it counts its effects (one per
// POST /v1/invoices it applied), in the order it applied them, and can
// hold each request after applying it, before it answers.
type invoices struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []invoice
	// hold, when set, is waited on after an effect is applied and before
	// the answer; applied hears of each effect first.
	hold    chan struct{}
	applied chan invoice
	// delay is how long each answer takes.
	delay time.Duration
	// pauseAt, when set, holds every answer from the pauseAt-th effect on
	// until pause is closed (see pauseAfter).
	pauseAt int
	pause   chan struct{}
}

// pauseAfter holds the answers from the n-th effect on (each effect
// applied, its answer not sent), until resume: a fault injected then
// meets deliveries in flight, and the stream cannot be done before it.
func (u *invoices) pauseAfter(n int) (paused func() bool, resume func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pauseAt, u.pause = n, make(chan struct{})
	return func() bool { return len(u.effects()) >= n }, func() { close(u.pause) }
}

type invoice struct {
	Key   string // the Idempotency-Key the upstream saw
	Event string `json:"event_id"`
	Seq   int    `json:"seq"`
}

func newInvoices(t *testing.T) *invoices {
	u := &invoices{applied: make(chan invoice, 100)}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/invoices" {
			http.NotFound(w, r)
			return
		}
		var in invoice
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &in)
		in.Key = r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.seen = append(u.seen, in)
		n, hold, delay := len(u.seen), u.hold, u.delay
		if u.pauseAt > 0 && n >= u.pauseAt {
			hold = u.pause
		}
		u.mu.Unlock()
		time.Sleep(delay)
		select {
		case u.applied <- in:
		default:
		}
		if hold != nil {
			<-hold
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"id":"INV-%d"}`, n)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// effects are the effects applied so far, in order.
func (u *invoices) effects() []invoice {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]invoice(nil), u.seen...)
}

// perEvent counts the effects of each event.
func (u *invoices) perEvent() map[string]int {
	out := map[string]int{}
	for _, in := range u.effects() {
		out[in.Event]++
	}
	return out
}

// suffix is a name part of the test's own, for streams and queues.
func suffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

// consumerConfig writes a configuration whose only work is one consumer,
// delivering to the invoices upstream (or upstreamURL, if set).
func consumerConfig(t *testing.T, dsn, upstreamURL, consumer string) string {
	path := filepath.Join(t.TempDir(), "consume.yaml")
	text := fmt.Sprintf(`store: %s
sweep_interval: 100ms
upstreams:
  billing: {url: %s, timeout: 2s, forward_key: true}
consumers:
%s
`, dsn, upstreamURL, consumer)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startConsume runs idemgate consume as a real process on the
// configuration, ready once its consumer says it is consuming.
func startConsume(t *testing.T, config string) *testenv.Process {
	t.Helper()
	return testenv.StartWorker(t, exec.Command(binary, "consume", "--config", config), "consuming")
}

// operations are the consumer's operations, read from its store.
func consumerOps(t *testing.T, db dbtest.DB, consumer string) []*ledger.Operation {
	t.Helper()
	store := db.Open(t)
	page, err := store.List(context.Background(), ledger.ListParams{Tenant: "acme", Limit: ledger.MaxPage})
	if err != nil {
		t.Fatal(err)
	}
	var out []*ledger.Operation
	for _, op := range page.Operations {
		if op.Kind == ledger.KindConsumer && op.Namespace == ledger.ConsumerNamespace(consumer) {
			out = append(out, op)
		}
	}
	return out
}

// killedDuringDelivery is the crash drill of a consumer: idemgate consume
// on cfg is SIGKILLed while the upstream applies the delivery publish
// sends (the effect is made, its answer never recorded), then started
// again; once settled says the broker holds nothing, there must be one
// effect and one operation, unknown (its lease lapsed with the effect
// possibly made) or succeeded.
func killedDuringDelivery(t *testing.T, db dbtest.DB, up *invoices, cfg string, publish func(), settled func() bool) {
	t.Helper()
	up.mu.Lock()
	up.hold = make(chan struct{})
	up.mu.Unlock()
	p := startConsume(t, cfg)
	publish()
	select {
	case <-up.applied:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream never received the delivery")
	}
	p.Kill()
	close(up.hold) // the answer goes to a dead consumer
	startConsume(t, cfg)
	waitFor(t, "the redelivery acknowledged", settled)
	if n := len(up.effects()); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	ops := consumerOps(t, db, "billing")
	if len(ops) != 1 || (ops[0].State != ledger.Unknown && ops[0].State != ledger.Succeeded) {
		t.Fatalf("operations %v, want one unknown or succeeded", ops)
	}
}
