package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// keyedTarget is a small idempotent API for the checks that need what the
// reference API lacks: a status resource (saying what status says) and a
// concurrency group (held for hold after each write, when lock is on).
type keyedTarget struct {
	mu      sync.Mutex
	ops     map[string]string // key → body
	until   map[string]time.Time
	effects int
	status  string // the state the status resource shows; "" for 404
	lock    bool
}

func (k *keyedTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch r.URL.Path {
	case "/effects":
		fmt.Fprintf(w, `{"n":%d}`, k.effects)
	case "/status":
		if _, ok := k.ops[r.URL.Query().Get("key")]; !ok || k.status == "" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"state":%q}`, k.status)
	default:
		k.write(w, r)
	}
}

func (k *keyedTarget) write(w http.ResponseWriter, r *http.Request) {
	var body struct{ Group, N string }
	_ = json.NewDecoder(r.Body).Decode(&body)
	key, seen := r.Header.Get("Idempotency-Key"), body.Group+"/"+body.N
	switch prev, ok := k.ops[key]; {
	case ok && prev != seen:
		w.WriteHeader(422)
	case ok:
		w.WriteHeader(201)
	case k.lock && time.Now().Before(k.until[body.Group]):
		w.WriteHeader(409)
	default:
		k.ops[key], k.until[body.Group] = seen, time.Now().Add(time.Second)
		k.effects++
		w.WriteHeader(201)
	}
}

func runOn(t *testing.T, k *keyedTarget, only ...string) map[string]Result {
	t.Helper()
	k.ops, k.until = map[string]string{}, map[string]time.Time{}
	srv := httptest.NewServer(k)
	t.Cleanup(srv.Close)
	s, err := ParseScenario("k.yaml", []byte(fmt.Sprintf(`target: %s
write: {method: POST, path: /w, body: '{"n":"{{.run}}-{{.n}}","group":"g"}'}
idempotency: {header: Idempotency-Key}
effects: {get: /effects, count: body.n}
status: {get: '/status?key={{.key}}'}
concurrency_key: /group
`, srv.URL)))
	if err != nil {
		t.Fatal(err)
	}
	results, err := (&Runner{Scenario: s, Only: only}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Result{}
	for _, r := range results {
		out[r.ID] = r
	}
	return out
}

// TestStatusCheck: after a lost answer the status resource must say
// succeeded or unknown; not knowing the key, or saying prepared, fails.
func TestStatusCheck(t *testing.T) {
	for state, want := range map[string]string{"succeeded": "", "unknown": "", "prepared": FindingDishonestStatus,
		"": FindingDishonestStatus} {
		got := runOn(t, &keyedTarget{status: state}, "status")["status"]
		if (want == "") != (got.Verdict == Passed) || got.Finding != want || got.Effects != 1 {
			t.Errorf("status %q: %+v, want finding %q", state, got, want)
		}
	}
}

// TestConcurrencyCheck: two actions of one group at once: one performed
// passes; both performed is a group overlap.
func TestConcurrencyCheck(t *testing.T) {
	for lock, want := range map[bool]string{true: "", false: FindingGroupOverlap} {
		got := runOn(t, &keyedTarget{lock: lock}, "concurrency")["concurrency"]
		if (want == "") != (got.Verdict == Passed) || got.Finding != want {
			t.Errorf("lock %t: %+v, want finding %q", lock, got, want)
		}
	}
}

// TestNotApplicable: a check the scenario gives nothing for is not
// applicable, with the reason; never passed.
func TestNotApplicable(t *testing.T) {
	got := runOn(t, &keyedTarget{}, "wf-7", "wf-10", "wf-11")
	for id, reason := range map[string]string{"wf-7": "needs approvals", "wf-10": "names no business_key",
		"wf-11": "needs a workflow"} {
		if r := got[id]; r.Verdict != NotApplicable || !strings.Contains(r.Reason, reason) || r.ID != id || r.Check == "" {
			t.Errorf("%s: %+v, want not applicable: %s", id, r, reason)
		}
	}
	if _, err := (&Runner{Only: []string{"wf-99"}}).Run(context.Background()); err == nil {
		t.Error("an unknown check id")
	}
}

// TestCheckIdentities: a check's id and name are its identity in JSON and
// JUnit reports, which teams' CI keys on: they change only on purpose.
func TestCheckIdentities(t *testing.T) {
	var got []string
	for _, c := range Checks() {
		got = append(got, c[0]+" "+c[1])
	}
	want := []string{"wf-1 same request twice", "wf-2 concurrent copies, one key",
		"wf-3 reset before delivery, then a retry", "wf-4 applied, then the answer replaced by 500",
		"wf-5 lost response, then a retry", "wf-6 payload changed under one key",
		"wf-7 approval expires before execution", "wf-8 retry after a long pause (lease expiry)",
		"wf-9 429 and its Retry-After", "wf-10 the same webhook several times (business key)",
		"wf-11 one effect succeeds and the next fails", "wf-12 a new, identical action on purpose (new key)",
		"agent-3 agent restarted between attempts", "status status of a disputed write",
		"concurrency two actions in one concurrency group at once"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("checks:\n%s", strings.Join(got, "\n"))
	}
}
