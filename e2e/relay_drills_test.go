package e2e

import (
	"context"
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
	"github.com/idemgate/idemgate/outbox"
)

// The relay drills run `idemgate relay` as real processes on a store a Go
// service filled (the test enqueues its effects), SIGKILL them, and count
// the effects at the target.

// startRelay runs `idemgate relay` on the store, delivering to target
// "ops" at url.
func startRelay(t *testing.T, dsn, url string, flags ...string) *testenv.Process {
	config := filepath.Join(t.TempDir(), "relay.yaml")
	text := fmt.Sprintf("store: %s\nupstreams:\n  ops: {url: %s, timeout: 1s}\n", dsn, url)
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, append([]string{"relay", "--config", config, "--every", "50ms"}, flags...)...)
	return testenv.StartWorker(t, cmd, "relaying")
}

func ticketEffect(opKey, name string) outbox.Effect {
	return outbox.Effect{Tenant: "acme", OperationKey: opKey, Name: name, Target: "ops", Path: "/v1/tickets",
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(fmt.Sprintf(`{"project":"OPS","title":"%s %s","priority":2}`, opKey, name))}
}

// waitEffects waits until the operation's effects are all in state.
func waitEffects(t *testing.T, s ledger.Store, opKey string, state ledger.State) []*ledger.Effect {
	var es []*ledger.Effect
	waitFor(t, "effects of "+opKey+" "+string(state), func() bool {
		var err error
		if es, err = s.Effects(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: opKey}); err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.State != state {
				return false
			}
		}
		return len(es) > 0
	})
	return es
}

// TestDrillRelayKilledAfterDelivery: the relay is SIGKILLed once the
// target has applied the effect and before its answer reaches the relay,
// so the delivery is never recorded. Its lease lapses; another relay
// process sends it again with the same key, and the target, which
// honours keys, shows one ticket.
func TestDrillRelayKilledAfterDelivery(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		d := newDrill(t, setup{idempotentAPI: true})
		s := db.Open(t)
		var mu sync.Mutex
		var keys []string
		var first *testenv.Process
		killed := make(chan struct{})
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			keys = append(keys, r.Header.Get("Idempotency-Key"))
			kill, relay := len(keys) == 1, first
			mu.Unlock()
			resp, body := forward(t, d.api.URL, r)
			if kill { // applied at the API; the relay never hears of it
				relay.Kill()
				close(killed)
				return
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(body)
		}))
		t.Cleanup(proxy.Close)
		mu.Lock()
		first = startRelay(t, db.DSN, proxy.URL, "--lease", "3s")
		mu.Unlock()
		if _, err := outbox.Enqueue(context.Background(), s, ticketEffect("incident-7", "open-ticket")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-killed:
		case <-time.After(time.Minute):
			t.Fatal("the first relay never delivered")
		}
		startRelay(t, db.DSN, proxy.URL, "--lease", "3s")
		es := waitEffects(t, s, "incident-7", ledger.Succeeded)
		mu.Lock()
		defer mu.Unlock()
		if len(keys) != 2 || keys[0] != keys[1] || keys[0] != "acme:incident-7/open-ticket" {
			t.Fatalf("deliveries with keys %q, want the same derived key twice", keys)
		}
		if es[0].Attempts != 2 {
			t.Fatalf("effect %+v", es[0])
		}
		d.wantEffects("tickets_created", 1)
	})
}

// forward sends r on to the API and reads its whole answer.
func forward(t *testing.T, api string, r *http.Request) (*http.Response, []byte) {
	body, _ := io.ReadAll(r.Body)
	out, err := http.NewRequest(r.Method, api+r.URL.RequestURI(), strings.NewReader(string(body)))
	if err != nil {
		t.Error(err)
		return &http.Response{StatusCode: 502}, nil
	}
	out.Header = r.Header.Clone()
	resp, err := noReuse.Do(out)
	if err != nil {
		t.Error(err)
		return &http.Response{StatusCode: 502}, nil
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp, answer
}

// TestDrillTwoRelaysNeverDeliverOneEffectAtOnce: two relay processes on
// one store, eight deliveries each at a time, against a slow target that
// watches what is in flight: no key is ever delivered twice at the same
// moment, and every effect is delivered once, in its operation's order.
func TestDrillTwoRelaysNeverDeliverOneEffectAtOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		s := db.Open(t)
		w := &watcher{inFlight: map[string]int{}, delivered: map[string]int{}}
		target := httptest.NewServer(w)
		t.Cleanup(target.Close)
		const ops = 40
		for i := range ops {
			op := fmt.Sprintf("dossier_%d:v5", i)
			if _, err := outbox.Enqueue(context.Background(), s, ticketEffect(op, "make-pdf"),
				ticketEffect(op, "store-pdf"), ticketEffect(op, "send-link")); err != nil {
				t.Fatal(err)
			}
		}
		startRelay(t, db.DSN, target.URL, "--concurrency", "8")
		startRelay(t, db.DSN, target.URL, "--concurrency", "8")
		for i := range ops {
			waitEffects(t, s, fmt.Sprintf("dossier_%d:v5", i), ledger.Succeeded)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.maxFlight != 1 || len(w.delivered) != 3*ops || w.outOfOrder != 0 {
			t.Fatalf("%d keys delivered (want %d), at most %d in flight at once, %d out of order", len(w.delivered),
				3*ops, w.maxFlight, w.outOfOrder)
		}
		for key, n := range w.delivered {
			if n != 1 {
				t.Fatalf("%s delivered %d times", key, n)
			}
		}
	})
}

// watcher is a slow target that watches deliveries: how many of one key
// are in flight at once, how often each key came, and whether an
// operation's effect came before the one enqueued ahead of it.
type watcher struct {
	mu         sync.Mutex
	inFlight   map[string]int
	delivered  map[string]int
	maxFlight  int
	outOfOrder int
}

var effectOrder = map[string]string{"store-pdf": "make-pdf", "send-link": "store-pdf"}

func (w *watcher) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	w.mu.Lock()
	w.inFlight[key]++
	w.delivered[key]++
	w.maxFlight = max(w.maxFlight, w.inFlight[key])
	if cut := strings.LastIndex(key, "/"); cut > 0 {
		if before, ok := effectOrder[key[cut+1:]]; ok && w.delivered[key[:cut+1]+before] == 0 {
			w.outOfOrder++
		}
	}
	w.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	w.mu.Lock()
	w.inFlight[key]--
	w.mu.Unlock()
	rw.WriteHeader(http.StatusCreated)
}
