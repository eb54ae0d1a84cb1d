package drill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/jsonptr"
)

// Verdict is how a check came out.
type Verdict string

// The verdicts. A check that cannot apply to the target is NotApplicable,
// with its reason: never passed.
const (
	Passed        Verdict = "passed"
	FailedCheck   Verdict = "failed"
	NotApplicable Verdict = "not_applicable"
)

// Result is one check's report line.
type Result struct {
	Check    string  `json:"check"`
	Requests int     `json:"requests"`
	Effects  int64   `json:"effects"`
	Expected int64   `json:"expected"`
	Verdict  Verdict `json:"verdict"`
	// Finding names what a failed check found: "duplicate_effect",
	// "lost_answer", "changed_payload_replayed", or "" for another failure.
	Finding string `json:"finding,omitempty"`
	Reason  string `json:"reason"`
}

// Serious reports whether a result is one the exit status must flag: a
// duplicate effect, a lost answer, a silent replay of a changed payload.
func (r Result) Serious() bool { return r.Verdict == FailedCheck && r.Finding != "" }

// Runner runs the checks of a scenario through its fault proxy.
type Runner struct {
	Scenario *Scenario
	// Timeout bounds one request (10s); a lost answer shows as the
	// client's error well within it.
	Timeout time.Duration

	proxy  *Proxy
	front  *httptest.Server
	client *http.Client
	run    string
	n      int
	mu     sync.Mutex
}

// check is one named check.
type check struct {
	name string
	fn   func(r *Runner, ctx context.Context) Result
}

// checks are the articles' checks this drill runs, in order.
var checks = []check{
	{"same request twice", (*Runner).sameTwice},
	{"concurrent copies, one key", (*Runner).concurrentCopies},
	{"lost response, then a retry", (*Runner).lostResponse},
	{"payload changed under one key", (*Runner).changedPayload},
	{"429 and its Retry-After", (*Runner).rateLimited},
	{"retry after a long pause", (*Runner).longPause},
	{"the same webhook several times (business key)", (*Runner).businessKey},
	{"a new, identical action on purpose (new key)", (*Runner).newKey},
}

// Run runs every check and returns their results.
func (r *Runner) Run(ctx context.Context) ([]Result, error) {
	p, err := NewProxy(r.Scenario.Target)
	if err != nil {
		return nil, err
	}
	r.proxy, r.front = p, httptest.NewServer(p)
	defer r.front.Close()
	if r.Timeout <= 0 {
		r.Timeout = 10 * time.Second
	}
	r.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: r.Timeout}
	var b [4]byte
	_, _ = rand.Read(b[:])
	r.run = hex.EncodeToString(b[:])
	out := make([]Result, 0, len(checks))
	for _, c := range checks {
		res := c.fn(r, ctx)
		res.Check = c.name
		out = append(out, res)
	}
	return out, nil
}

// action is one intended action: its key and its body.
type action struct {
	key  string
	body []byte
}

// next is a new action, distinct from every other of this drill.
func (r *Runner) next() action {
	r.mu.Lock()
	r.n++
	n := r.n
	r.mu.Unlock()
	body, _ := r.Scenario.Body(n, r.run)
	return action{key: fmt.Sprintf("drill-%s-%d", r.run, n), body: body}
}

// answer is what the client got.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// send sends a's write through the proxy, with its key as the scenario
// says to express it.
func (r *Runner) send(ctx context.Context, a action) answer {
	s := r.Scenario
	body := a.body
	if ptr := s.Idempotency.Body; ptr != "" {
		body = withKey(body, ptr, a.key)
	}
	req, err := http.NewRequestWithContext(ctx, s.Write.Method, r.front.URL+s.Write.Path, strings.NewReader(string(body)))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range s.Headers {
		req.Header.Set(k, v)
	}
	if h := s.Idempotency.Header; h != "" {
		req.Header.Set(h, a.key)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// withKey writes key into a JSON body at ptr; a body that is not an
// object is left as it is.
func withKey(body []byte, ptr, key string) []byte {
	var doc map[string]any
	toks, err := jsonptr.Parse(ptr)
	if err != nil || len(toks) != 1 || json.Unmarshal(body, &doc) != nil {
		return body
	}
	doc[toks[0]] = key
	out, err := json.Marshal(doc)
	if err != nil {
		return body
	}
	return out
}

// effects reads the target's effect count, directly (not through the
// proxy: a count is never faulted).
func (r *Runner) effects(ctx context.Context) (int64, error) {
	s := r.Scenario
	where := s.Effects.Get
	if strings.HasPrefix(where, "/") {
		where = strings.TrimSuffix(s.Target, "/") + where
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, where, nil)
	if err != nil {
		return 0, err
	}
	for k, v := range s.Headers {
		req.Header.Set(k, v)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("effects: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("effects: %w", err)
	}
	return s.Count(resp.StatusCode, resp.Header, b)
}

// settle waits for the target's count to stop moving (a late write lands)
// and returns how much it grew since before.
func (r *Runner) settle(ctx context.Context, before int64) (int64, error) {
	last := int64(-1)
	for i := 0; i < 20; i++ {
		n, err := r.effects(ctx)
		if err != nil {
			return 0, err
		}
		if n == last {
			return n - before, nil
		}
		last = n
		time.Sleep(100 * time.Millisecond)
	}
	return last - before, nil
}
