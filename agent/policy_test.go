package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock advances only when slept on, and records each sleep.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) Random() float64 { return 0.5 }

func (f *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.sleeps = append(f.sleeps, d)
	return nil
}

func TestDecideEveryFamily(t *testing.T) {
	problem := func(status int, code string) attempt { return attempt{status: status, code: code, sent: true} }
	replayed := attempt{status: 201, sent: true, header: http.Header{"Idempotent-Replayed": {"true"}}}
	for name, c := range map[string]struct {
		a    attempt
		step step
		kind Kind
	}{
		"connection refused":    {attempt{err: errors.New("refused")}, stepRetry, Failed},
		"timeout after sending": {attempt{err: errors.New("timeout"), sent: true}, stepReconcile, Unknown},
		"429":                   {problem(429, ""), stepRetry, Failed},
		"502 nothing sent":      {problem(502, "upstream_unavailable"), stepRetry, Failed},
		"503":                   {problem(503, "store_unavailable"), stepRetry, Failed},
		"in progress":           {problem(409, "in_progress"), stepWaitStatus, InProgress},
		"outcome unknown 409":   {problem(409, "outcome_unknown"), stepDone, Unknown},
		"outcome unknown 504":   {problem(504, "outcome_unknown"), stepDone, Unknown},
		"fingerprint mismatch":  {problem(422, "fingerprint_mismatch"), stepDone, Conflict},
		"invalid command":       {problem(422, "invalid_command"), stepDone, Rejected},
		"missing key":           {problem(400, "missing_key"), stepDone, Rejected},
		"too large":             {problem(413, "payload_too_large"), stepDone, Rejected},
		"concurrency locked":    {problem(409, "concurrency_locked"), stepRetry, Failed},
		"gateway rate limit":    {problem(429, "rate_limited"), stepRetry, Failed},
		"business refusal":      {attempt{status: 422, header: http.Header{}}, stepDone, Rejected},
		"unauthorized":          {problem(401, "unauthorized"), stepDone, Unauthorized},
		"forbidden":             {problem(403, "forbidden"), stepDone, Unauthorized},
		"approval denied":       {problem(403, "approval_denied"), stepDone, Failed},
		"needs approval":        {attempt{status: 202, header: http.Header{}, approval: &ApprovalInfo{ID: "apr_1"}}, stepDone, NeedsApproval},
		"an upstream's 202":     {attempt{status: 202, header: http.Header{}}, stepDone, Created},
		"created":               {attempt{status: 201, header: http.Header{}}, stepDone, Created},
		"replayed":              {replayed, stepDone, Replayed},
		"upstream 500":          {attempt{status: 500, header: http.Header{}}, stepReconcile, Unknown},
		"raw 503":               {attempt{status: 503, header: http.Header{}}, stepReconcile, Unknown},
	} {
		if s, k := decide(c.a); s != c.step || k != c.kind {
			t.Errorf("%s: got step %d %s, want %d %s", name, s, k, c.step, c.kind)
		}
	}
}

func TestBackoffFullJitter(t *testing.T) {
	p := Policy{}.withDefaults()
	for n, ceiling := range map[int]time.Duration{1: 200 * time.Millisecond, 2: 400 * time.Millisecond,
		5: 3200 * time.Millisecond, 7: 10 * time.Second, 70: 10 * time.Second} {
		if got := p.backoff(n, func() float64 { return 0.999999 }); got > ceiling || got < ceiling*99/100 {
			t.Errorf("attempt %d: ceiling %v, got %v", n, ceiling, got)
		}
		if got := p.backoff(n, func() float64 { return 0 }); got != 0 {
			t.Errorf("attempt %d: full jitter starts at 0, got %v", n, got)
		}
	}
}

func TestRetryAfterForms(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{"3": 3 * time.Second, "": 0, "-1": 0, "soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second} {
		if got := retryAfter(http.Header{"Retry-After": {v}}, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}
}

// script is a fake gateway answering each request with the next handler
// (the last one repeats), and the control API's lookups with lookup.
type script struct {
	mu      sync.Mutex
	sends   []http.Header
	answers []http.HandlerFunc
	lookup  http.HandlerFunc
	onSend  func(n int) // called with the send's number before it is answered
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/_idem/v1/operations" {
		s.lookup(w, r)
		return
	}
	s.mu.Lock()
	n := len(s.sends)
	s.sends = append(s.sends, r.Header.Clone())
	h := s.answers[min(n, len(s.answers)-1)]
	s.mu.Unlock()
	if s.onSend != nil {
		s.onSend(n + 1)
	}
	h(w, r)
}

func (s *script) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sends)
}

// awaiting answers as the gateway does for an operation that waits for an
// approval.
func awaiting(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Idempotency-Operation", "op_1")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	fmt.Fprint(w, `{"code":"approval_required","operation_id":"op_1","state":"prepared",`+
		`"approval":{"id":"apr_1","status":"pending","expires_at":"2026-12-02T12:15:00Z","summary":"Deploy"}}`)
}

func status(code int, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Idempotency-Operation", "op_1")
		w.WriteHeader(code)
		fmt.Fprint(w, `{"id":"T-1"}`)
	}
}

func problemAnswer(code int, name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Idempotency-Operation", "op_1")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"code":%q,"detail":"said by the script"}`, name)
	}
}

// lost reads the request, then cuts the connection: sent, no answer.
func lost(w http.ResponseWriter, r *http.Request) {
	conn, _, _ := http.NewResponseController(w).Hijack()
	conn.Close()
}

func lookupSays(state string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if state == "" {
			problemAnswer(404, "not_found")(w, r)
			return
		}
		fmt.Fprintf(w, `{"id":"op_1","state":%q}`, state)
	}
}

func newScripted(t *testing.T, s *script) (*Client, *fakeClock) {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	j, err := OpenJournal(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	clk := &fakeClock{now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	return &Client{BaseURL: srv.URL, Token: "t", Journal: j, Clock: clk}, clk
}

func TestPolicyAgainstAScriptedGateway(t *testing.T) {
	ticket := Action{Intent: "task-1/ticket", Method: "POST", Path: "/v1/tickets", Body: []byte(`{"title":"x"}`)}
	cases := map[string]struct {
		answers []http.HandlerFunc
		lookup  http.HandlerFunc
		policy  Policy
		kind    Kind
		sends   int
		sleeps  []time.Duration
		prefer  []string // each send's Prefer; none when nil
	}{
		"429 waits Retry-After": {answers: []http.HandlerFunc{status(429, "Retry-After", "3"), status(201)},
			kind: Created, sends: 2, sleeps: []time.Duration{3 * time.Second}},
		"the gateway's rate limit, then a free concurrency group": {answers: []http.HandlerFunc{
			problemAnswer(429, "rate_limited"), problemAnswer(409, "concurrency_locked"), status(201)},
			kind: Created, sends: 3, sleeps: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		"503 backs off": {answers: []http.HandlerFunc{problemAnswer(503, "store_unavailable"),
			problemAnswer(502, "upstream_unavailable"), status(201)},
			kind: Created, sends: 3, sleeps: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		"upstream 500 passed through: asks, unknown": {answers: []http.HandlerFunc{status(500), status(201)},
			lookup: lookupSays("unknown"), kind: Unknown, sends: 1},
		"raw 503, not applied: resent": {answers: []http.HandlerFunc{status(503), status(201)},
			lookup: lookupSays("prepared"), kind: Created, sends: 2, sleeps: []time.Duration{100 * time.Millisecond}},
		"503 past the attempts budget": {answers: []http.HandlerFunc{problemAnswer(503, "store_unavailable")}, policy: Policy{MaxAttempts: 3},
			kind: Failed, sends: 3, sleeps: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		"Retry-After past the time budget": {answers: []http.HandlerFunc{status(429, "Retry-After", "600")},
			kind: Failed, sends: 1},
		"lost, never reserved: resent": {answers: []http.HandlerFunc{lost, status(201)}, lookup: lookupSays(""),
			kind: Created, sends: 2, sleeps: []time.Duration{100 * time.Millisecond}},
		"lost, released: resent": {answers: []http.HandlerFunc{lost, status(201)}, lookup: lookupSays("prepared"),
			kind: Created, sends: 2, sleeps: []time.Duration{100 * time.Millisecond}},
		"lost, unknown: not resent": {answers: []http.HandlerFunc{lost, status(201)}, lookup: lookupSays("unknown"),
			kind: Unknown, sends: 1},
		"lost, executing: waits then replayed": {answers: []http.HandlerFunc{lost, status(201, "Idempotent-Replayed", "true")},
			lookup: lookupSays("executing"), kind: Replayed, sends: 2, sleeps: []time.Duration{100 * time.Millisecond},
			prefer: []string{"", "wait=10"}},
		"lost, lookup fails: asks again, sends nothing": {answers: []http.HandlerFunc{lost, status(201)},
			lookup: status(500), policy: Policy{MaxAttempts: 3}, kind: Unknown, sends: 1,
			sleeps: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		"in progress, then the answer": {answers: []http.HandlerFunc{problemAnswer(409, "in_progress"),
			status(201, "Idempotent-Replayed", "true")}, kind: Replayed, sends: 2,
			sleeps: []time.Duration{100 * time.Millisecond}, prefer: []string{"", "wait=10"}},
		"outcome unknown stops":      {answers: []http.HandlerFunc{problemAnswer(409, "outcome_unknown")}, kind: Unknown, sends: 1},
		"fingerprint mismatch stops": {answers: []http.HandlerFunc{problemAnswer(422, "fingerprint_mismatch")}, kind: Conflict, sends: 1},
		"validation stops":           {answers: []http.HandlerFunc{problemAnswer(422, "invalid_command")}, kind: Rejected, sends: 1},
		"authentication stops":       {answers: []http.HandlerFunc{problemAnswer(401, "unauthorized")}, kind: Unauthorized, sends: 1},
		"approval needed":            {answers: []http.HandlerFunc{awaiting}, kind: NeedsApproval, sends: 1},
		"in progress past the budget": {answers: []http.HandlerFunc{problemAnswer(409, "in_progress")}, policy: Policy{MaxAttempts: 2}, kind: InProgress, sends: 2, sleeps: []time.Duration{100 * time.Millisecond},
			prefer: []string{"", "wait=10"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := &script{answers: c.answers, lookup: c.lookup}
			client, clk := newScripted(t, s)
			client.Policy = c.policy
			// Each attempt is in the journal before the gateway sees it.
			s.onSend = func(n int) {
				if e, err := client.Journal.Latest(context.Background(), ticket.Intent); err != nil || e.Attempts != n {
					t.Errorf("send %d reached the gateway before its attempt was journaled: %+v %v", n, e, err)
				}
			}
			out, err := client.Do(context.Background(), ticket)
			if err != nil || out.Kind != c.kind || s.count() != c.sends {
				t.Fatalf("got %s after %d sends (%v), want %s after %d", out.Kind, s.count(), err, c.kind, c.sends)
			}
			if fmt.Sprint(clk.sleeps) != fmt.Sprint(c.sleeps) {
				t.Fatalf("slept %v, want %v", clk.sleeps, c.sleeps)
			}
			// Prefer: wait only on a retry that meets its operation in
			// flight: the gateway would hold any other for a decision.
			for i, h := range s.sends {
				want := ""
				if i < len(c.prefer) {
					want = c.prefer[i]
				}
				if h.Get("Idempotency-Key") != out.Key || h.Get("Prefer") != want {
					t.Fatalf("send %d: want the intent's key and Prefer %q: %v", i+1, want, h)
				}
			}
			e, _ := client.Journal.Latest(context.Background(), ticket.Intent)
			if e.Attempts != c.sends || e.LastKind != c.kind || (c.kind != Unknown && e.OperationID != "op_1") {
				t.Fatalf("journal: %+v", e)
			}
		})
	}
}

func TestConnectionRefusedIsRetriedThenFails(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	client, clk := newScripted(t, &script{answers: []http.HandlerFunc{status(201)}})
	client.BaseURL, client.Policy = "http://"+addr, Policy{MaxAttempts: 4}
	out, err := client.Do(context.Background(), Action{Intent: "i", Method: "POST", Path: "/v1/x"})
	if err != nil || out.Kind != Failed || out.Attempts != 4 || len(clk.sleeps) != 3 {
		t.Fatalf("%+v %v, slept %v", out, err, clk.sleeps)
	}
}

func TestCancelledContextStops(t *testing.T) {
	client, _ := newScripted(t, &script{answers: []http.HandlerFunc{status(503)}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := client.Do(ctx, Action{Intent: "i", Method: "POST", Path: "/v1/x"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

// A resume of an intent whose operation the gateway no longer holds (its
// retention passed) is not sent again: it would be performed again.
func TestResumeAfterRetentionIsNotResent(t *testing.T) {
	gone := false
	s := &script{answers: []http.HandlerFunc{status(201)}, lookup: func(w http.ResponseWriter, r *http.Request) {
		if gone {
			problemAnswer(404, "not_found")(w, r)
			return
		}
		fmt.Fprint(w, `{"id":"op_1","state":"succeeded"}`)
	}}
	client, _ := newScripted(t, s)
	a := Action{Intent: "task-5", Method: "POST", Path: "/v1/tickets"}
	if out, err := client.Do(context.Background(), a); err != nil || out.Kind != Created {
		t.Fatalf("%+v %v", out, err)
	}
	if out, _ := client.Do(context.Background(), a); out.Kind != Created || s.count() != 2 {
		t.Fatalf("a resume within retention is resent and replayed: %+v, %d sends", out, s.count())
	}
	gone = true
	out, err := client.Do(context.Background(), a)
	if err != nil || out.Kind != Created || s.count() != 2 || !strings.Contains(out.Reason, "no longer holds") {
		t.Fatalf("after retention: %+v %v, %d sends", out, err, s.count())
	}
}

// An unknown intent may not be repeated or revised before it is reconciled.
func TestNoNewActionBeforeReconciliation(t *testing.T) {
	client, _ := newScripted(t, &script{answers: []http.HandlerFunc{problemAnswer(409, "outcome_unknown")},
		lookup: lookupSays("unknown")})
	a := Action{Intent: "charge-1", Method: "POST", Path: "/v1/captures", Body: []byte(`{"amount":1}`)}
	if out, _ := client.Do(context.Background(), a); out.Kind != Unknown {
		t.Fatalf("%+v", out)
	}
	for _, m := range []Mode{Repeat, Revise} {
		b := a
		b.Mode = m
		if m == Revise {
			b.Body = []byte(`{"amount":2}`)
		}
		if _, err := client.Do(context.Background(), b); !errors.Is(err, ErrNotSettled) {
			t.Fatalf("%s of an unknown intent: %v", m, err)
		}
	}
}

// Two callers creating one intent with different requests: the second is
// refused, never sent under the first one's key.
func TestRacingCreatesWithDifferentRequests(t *testing.T) {
	client, _ := newScripted(t, &script{answers: []http.HandlerFunc{status(201)}})
	ctx := context.Background()
	if _, err := client.Journal.create(ctx, Entry{Intent: "i", Version: 1, Method: "POST", Path: "/a", Fingerprint: "sha256:1"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := client.created(ctx, Entry{Intent: "i", Version: 1, Method: "POST", Path: "/b", Fingerprint: "sha256:2"}); !errors.Is(err, ErrPayloadChanged) {
		t.Fatalf("err %v", err)
	}
}

// The journal's last outcome only moves forward.
func TestRecordNeverGoesBackwards(t *testing.T) {
	client, _ := newScripted(t, &script{answers: []http.HandlerFunc{status(201)}})
	ctx := context.Background()
	j := client.Journal
	e, _ := j.create(ctx, Entry{Intent: "i", Version: 1, Method: "POST", Path: "/a", Fingerprint: "f"}, nil)
	last := func() Kind { l, _ := j.Latest(ctx, "i"); return l.LastKind }
	j.record(ctx, e.Key, 0, Outcome{Kind: Failed}, false, SentNo)
	if last() != Failed {
		t.Fatalf("a first outcome is kept even unreached: %s", last())
	}
	j.record(ctx, e.Key, 1, Outcome{Kind: Unknown}, true, SentMaybe)
	j.record(ctx, e.Key, 2, Outcome{Kind: Failed}, false, SentNo) // the gateway was down
	if last() != Unknown {
		t.Fatalf("an unreached attempt replaced unknown: %s", last())
	}
	j.record(ctx, e.Key, 3, Outcome{Kind: Created}, true, SentYes)
	j.record(ctx, e.Key, 4, Outcome{Kind: InProgress}, true, SentYes) // another process, late
	if last() != Created {
		t.Fatalf("created was replaced: %s", last())
	}
	st := Status{Entry: &Entry{LastKind: Unknown}, Operation: []byte(`{"state":"prepared"}`)}
	if st.Kind() != Failed {
		t.Fatalf("an operation resolved as not applied: %s", st.Kind())
	}
}

// A "not now" after the gateway said in_progress does not turn the intent
// failed: the operation may still succeed, so no repeat is let through.
func TestNotNowKeepsWhatTheGatewaySaid(t *testing.T) {
	client, _ := newScripted(t, &script{answers: []http.HandlerFunc{problemAnswer(409, "in_progress"),
		problemAnswer(503, "store_unavailable")}})
	client.Policy = Policy{MaxAttempts: 3}
	a := Action{Intent: "deploy-1", Method: "POST", Path: "/v1/deployments"}
	out, err := client.Do(context.Background(), a)
	if err != nil || out.Kind != InProgress {
		t.Fatalf("%+v %v", out, err)
	}
	if e, _ := client.Journal.Latest(context.Background(), "deploy-1"); e.LastKind != InProgress {
		t.Fatalf("journal: %s", e.LastKind)
	}
	a.Mode = Repeat
	if _, err := client.Do(context.Background(), a); !errors.Is(err, ErrNotSettled) {
		t.Fatalf("repeat while in progress: %v", err)
	}
}

// A process killed after an attempt was sent and before its answer was
// recorded leaves an intent that resumes by asking first; with the gateway
// down it stays unknown, never failed.
func TestCrashBetweenSendAndRecord(t *testing.T) {
	client, _ := newScripted(t, &script{answers: []http.HandlerFunc{status(201)}})
	ctx := context.Background()
	e, _ := client.Journal.create(ctx, Entry{Intent: "crashed", Version: 1, Method: "POST", Path: "/v1/x",
		Fingerprint: mustFingerprint(t, Action{Intent: "crashed", Method: "POST", Path: "/v1/x"})}, nil)
	client.Journal.beginAttempt(ctx, e.Key) // sent; then the process died
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	client.BaseURL = "http://" + ln.Addr().String()
	ln.Close()
	client.Policy = Policy{MaxAttempts: 2}
	a := Action{Intent: "crashed", Method: "POST", Path: "/v1/x"}
	if out, _ := client.Do(ctx, a); out.Kind != Unknown {
		t.Fatalf("resume with the gateway down: %+v", out)
	}
	if last, _ := client.Journal.Latest(ctx, "crashed"); last.LastKind != Unknown || last.Attempts != 1 {
		t.Fatalf("journal: %+v (nothing may be sent unasked)", last)
	}
	a.Mode = Repeat
	if _, err := client.Do(ctx, a); !errors.Is(err, ErrNotSettled) {
		t.Fatalf("repeat: %v", err)
	}
}

func mustFingerprint(t *testing.T, a Action) string {
	fp, err := actionFingerprint(a)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

func TestMoreFamilies(t *testing.T) {
	pending := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"id":"op_1","state":"prepared","approval":{"status":"pending"}}`)
	}
	for name, c := range map[string]struct {
		answers []http.HandlerFunc
		lookup  http.HandlerFunc
		kind    Kind
		sends   int
	}{
		"a stored 5xx replayed is final": {answers: []http.HandlerFunc{status(503, "Idempotent-Replayed", "true")},
			kind: Failed, sends: 1},
		"upstream 409 released: retried": {answers: []http.HandlerFunc{status(409), status(201)}, kind: Created, sends: 2},
		"upstream 425 released: retried": {answers: []http.HandlerFunc{status(425), status(201)}, kind: Created, sends: 2},
		"a lost 202: awaiting approval":  {answers: []http.HandlerFunc{lost}, lookup: pending, kind: NeedsApproval, sends: 1},
	} {
		t.Run(name, func(t *testing.T) {
			s := &script{answers: c.answers, lookup: c.lookup}
			client, _ := newScripted(t, s)
			out, err := client.Do(context.Background(), Action{Intent: "i", Method: "POST", Path: "/v1/x"})
			if err != nil || out.Kind != c.kind || s.count() != c.sends {
				t.Fatalf("got %s after %d sends (%v), want %s after %d", out.Kind, s.count(), err, c.kind, c.sends)
			}
		})
	}
}

// A repeat is refused while any intent of its family is unsettled.
func TestRepeatChecksTheFamily(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{status(201), problemAnswer(409, "outcome_unknown")}, lookup: lookupSays("unknown")}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	a := Action{Intent: "x", Method: "POST", Path: "/v1/x"}
	client.Do(ctx, a) // created
	a.Mode = Repeat
	if out, _ := client.Do(ctx, a); out.Intent != "x#2" || out.Kind != Unknown {
		t.Fatalf("x#2: %+v", out)
	}
	if _, err := client.Do(ctx, a); !errors.Is(err, ErrNotSettled) || !strings.Contains(err.Error(), "x#2") {
		t.Fatalf("repeat of x while x#2 is unknown: %v", err)
	}
}

// A purged operation the journal saw unknown is not resent, and says to
// check by hand and name a new intent.
func TestPurgedUnknownSaysWhatToDo(t *testing.T) {
	gone := false
	s := &script{answers: []http.HandlerFunc{problemAnswer(409, "outcome_unknown")}, lookup: func(w http.ResponseWriter, r *http.Request) {
		if gone {
			problemAnswer(404, "not_found")(w, r)
			return
		}
		fmt.Fprint(w, `{"id":"op_1","state":"unknown"}`)
	}}
	client, _ := newScripted(t, s)
	a := Action{Intent: "charge", Method: "POST", Path: "/v1/x"}
	client.Do(context.Background(), a)
	gone = true
	out, _ := client.Do(context.Background(), a)
	if out.Kind != Unknown || s.count() != 1 || !strings.Contains(out.Reason, "name a new intent") {
		t.Fatalf("%+v, %d sends", out, s.count())
	}
	st, _ := client.Status(context.Background(), "charge")
	if !strings.Contains(st.Problem, "retention has passed") {
		t.Fatalf("status: %+v", st)
	}
}

// An intent sent long ago whose answer was never recorded, and that the
// gateway no longer knows, is not sent again: it may have been performed
// and purged.
func TestStaleUnrecordedIntentIsNotResent(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{status(201)}, lookup: lookupSays("")}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	a := Action{Intent: "old", Method: "POST", Path: "/v1/x"}
	e, _ := client.Journal.create(ctx, Entry{Intent: "old", Version: 1, Method: "POST", Path: "/v1/x",
		Fingerprint: mustFingerprint(t, a)}, nil)
	client.Journal.beginAttempt(ctx, e.Key) // sent; the process died before the answer
	client.Policy = Policy{GatewayRetention: time.Millisecond}
	time.Sleep(5 * time.Millisecond)
	for range 2 { // and asking again changes nothing
		out, err := client.Do(ctx, a)
		if err != nil || out.Kind != Unknown || s.count() != 0 || !strings.Contains(out.Reason, "purged") {
			t.Fatalf("%+v %v, %d sends", out, err, s.count())
		}
	}
	// Within the retention, "none" means never reserved: it is sent.
	client.Policy = Policy{}
	if out, _ := client.Do(ctx, a); out.Kind != Created || s.count() != 1 {
		t.Fatalf("within retention: %+v, %d sends", out, s.count())
	}
	if last, _ := client.Journal.lastSentAttempt(ctx, e.Key); time.Since(last) > time.Minute {
		t.Fatalf("last attempt %v", last)
	}
}
