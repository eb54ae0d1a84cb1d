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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/inbox/webhook"
	"github.com/idemgate/idemgate/internal/jsonptr"
)

// Runner runs the checks of a scenario through its fault proxy.
type Runner struct {
	Scenario *Scenario
	// Timeout bounds one request (10s); a lost answer shows as the
	// client's error well within it.
	Timeout time.Duration
	// Only, if set, names the checks to run (by id); the others are not
	// reported.
	Only []string

	proxy  *Proxy
	front  *httptest.Server
	client *http.Client
	run    string
	n      int
	mu     sync.Mutex
	// unrendered is the first body that could not be rendered within the
	// bounds (render) during the run: the drill's verdicts are then void.
	unrendered error
}

// Run runs every check and returns their results, in the order of Checks.
func (r *Runner) Run(ctx context.Context) ([]Result, error) {
	for _, id := range r.Only {
		if !slices.ContainsFunc(checks, func(c check) bool { return c.id == id }) {
			return nil, fmt.Errorf("no check %q", id)
		}
	}
	p, err := NewProxy(r.Scenario.Target)
	if err != nil {
		return nil, err
	}
	r.proxy, r.front = p, httptest.NewServer(p)
	defer r.front.Close()
	if r.Timeout <= 0 {
		r.Timeout = 10 * time.Second
	}
	r.client = r.newClient()
	var b [4]byte
	_, _ = rand.Read(b[:])
	r.run = hex.EncodeToString(b[:])
	out := make([]Result, 0, len(checks))
	for _, c := range checks {
		if len(r.Only) > 0 && !slices.Contains(r.Only, c.id) {
			continue
		}
		res := c.fn(r, ctx)
		res.ID, res.Check, res.Covers = c.id, c.name, c.covers
		if res.Verdict == FailedCheck && res.Finding == "" {
			res.Finding = FindingError
		}
		out = append(out, res)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unrendered != nil {
		return nil, r.unrendered
	}
	return out, nil
}

// newClient is a client as a fresh agent process has one: no connection
// kept, so that Go's transport never re-sends a keyed request by itself.
func (r *Runner) newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: r.Timeout}
}

// action is one intended action: its key and its body. A webhook's
// redelivery is signed late after the first: a later timestamp, so a new
// signature, as a sender re-signs each attempt.
type action struct {
	key  string
	body []byte
	late time.Duration
}

// next is a new action, distinct from every other of this drill: its own
// key, its own body, and, where the scenario names them, its own business
// key and concurrency group, so that only the checks that mean to share
// them do.
func (r *Runner) next() action {
	r.mu.Lock()
	r.n++
	n := r.n
	r.mu.Unlock()
	s := r.Scenario
	body, err := s.Body(n, r.run)
	if err != nil {
		r.mu.Lock()
		if r.unrendered == nil {
			r.unrendered = s.errorf("write.body", "write.body, for action %d: %v", n, err)
		}
		r.mu.Unlock()
	}
	a := action{key: fmt.Sprintf("drill-%s-%d", r.run, n), body: body}
	if s.BusinessKey != "" {
		a.body = setPointer(a.body, s.BusinessKey, fmt.Sprintf("drill-event-%s-%d", r.run, n))
	}
	if s.ConcurrencyKey != "" {
		a.body = setPointer(a.body, s.ConcurrencyKey, fmt.Sprintf("drill-group-%s-%d", r.run, n))
	}
	return a
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
func (r *Runner) send(ctx context.Context, a action) answer { return r.sendWith(ctx, r.client, a) }

// sendWith is send with the client c.
func (r *Runner) sendWith(ctx context.Context, c *http.Client, a action) answer {
	s := r.Scenario
	body := a.body
	if ptr := s.Idempotency.Body; ptr != "" {
		body = setPointer(body, ptr, a.key)
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
	if w := s.Webhook; w.Scheme != "" {
		signed, err := webhook.Sign(w.Scheme, w.Secret, a.key, time.Now().Add(a.late), body)
		if err != nil {
			return answer{err: err}
		}
		for k, v := range signed {
			req.Header[k] = v
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// setPointer writes value into a JSON body at ptr, making the objects on
// the way; a body that is not an object is left as it is.
func setPointer(body []byte, ptr, value string) []byte {
	var doc map[string]any
	toks, err := jsonptr.Parse(ptr)
	if err != nil || len(toks) == 0 || json.Unmarshal(body, &doc) != nil || doc == nil {
		return body
	}
	cur := doc
	for _, t := range toks[:len(toks)-1] {
		next, ok := cur[t].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[t] = next
		}
		cur = next
	}
	cur[toks[len(toks)-1]] = value
	out, err := json.Marshal(doc)
	if err != nil {
		return body
	}
	return out
}

// get reads where (a path on the target, or a URL of its own) directly,
// not through the proxy: a count or a status is never faulted.
func (r *Runner) get(ctx context.Context, where string) (int, http.Header, []byte, error) {
	if strings.HasPrefix(where, "/") {
		where = strings.TrimSuffix(r.Scenario.Target, "/") + where
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, where, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range r.Scenario.Headers {
		req.Header.Set(k, v)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, resp.Header, b, err
}

// effects reads the target's effect count.
func (r *Runner) effects(ctx context.Context) (int64, error) {
	status, header, body, err := r.get(ctx, r.Scenario.Effects.Get)
	if err != nil {
		return 0, fmt.Errorf("effects: %w", err)
	}
	return r.Scenario.Count(status, header, body)
}

// settle waits until nothing is in flight at the proxy (a delayed
// original lands) and the target's count stops moving, and returns how
// much it grew since before.
func (r *Runner) settle(ctx context.Context, before int64) (int64, error) {
	if err := r.proxy.Idle(ctx); err != nil {
		return 0, err
	}
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
