package storetest

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

func runProbes(t *testing.T, b Backend) {
	t.Run("ProbeClaims", inParallel(b, testProbeClaims))
	t.Run("ProbeVerdicts", inParallel(b, testProbeVerdicts))
	t.Run("ProbeFencing", inParallel(b, testProbeFencing))
	t.Run("RaceProbeClaims", inParallel(b, testRaceProbeClaims))
	t.Run("ProbeEpisodes", inParallel(b, testProbeEpisodes))
}

// unknownOn makes an unknown operation of route.
func unknownOn(tb testing.TB, s ledger.Store, route string) *ledger.Operation {
	tb.Helper()
	p := Params(Long)
	p.Route, p.Probe = route, "GET /v1/lookup?key="+p.Key
	r := reserve(tb, s, p)
	op, err := s.MarkUnknown(ctx(tb), *r.Lease, ledger.Note{Reason: "answer lost"})
	if err != nil {
		tb.Fatal(err)
	}
	return op
}

func claim(tb testing.TB, s ledger.Store, lease time.Duration, routes ...string) []ledger.ProbeClaim {
	tb.Helper()
	cs, err := s.ClaimProbes(ctx(tb), ledger.ProbeClaimParams{Routes: routes, Limit: 10, Lease: lease})
	if err != nil {
		tb.Fatalf("claim probes: %v", err)
	}
	return cs
}

// testProbeClaims: a reconciler claims the unknown operations of the
// routes it probes, and no other: not another route's, not an executing
// or final one, not one another reconciler holds; an inconclusive probe
// is due again at its time, not before. Nothing here rests on how soon a
// statement runs: the probe not yet due is due in an hour, and the one due
// is waited for past its time.
func testProbeClaims(t *testing.T, b Backend) {
	s := b.Fresh(t)
	probed := unknownOn(t, s, "POST /v1/capture")
	unknownOn(t, s, "POST /v1/other")
	reserve(t, s, Params(Long)) // executing
	cs := claim(t, s, Long, "POST /v1/capture")
	if len(cs) != 1 || cs[0].Op.ID != probed.ID || cs[0].Op.State != ledger.Unknown || cs[0].Lease.Fence != 1 ||
		cs[0].Op.Probe != "GET /v1/lookup?key="+probed.Key ||
		cs[0].Lease.Probes != 1 || cs[0].Lease.Token == "" || cs[0].Lease.Until.Before(time.Now()) {
		t.Fatalf("claims %+v", cs)
	}
	if again := claim(t, s, Long, "POST /v1/capture"); len(again) != 0 {
		t.Fatalf("a held claim claimed again: %+v", again)
	}
	later := unknownOn(t, s, "POST /v1/capture")
	var laterClaim ledger.ProbeLease
	for _, c := range claim(t, s, Long, "POST /v1/capture") {
		laterClaim = c.Lease
	}
	if laterClaim.OpID != later.ID {
		t.Fatalf("the second operation's claim: %+v", laterClaim)
	}
	next := time.Now().Add(10 * time.Millisecond)
	for _, c := range []struct {
		lease ledger.ProbeLease
		next  time.Time
	}{{cs[0].Lease, next}, {laterClaim, time.Now().Add(Long)}} {
		if _, err := s.ProbeResult(ctx(t), c.lease, ledger.ProbeOutcome{Verdict: ledger.Inconclusive,
			Evidence: "probe answered 503", Next: c.next}); err != nil {
			t.Fatal(err)
		}
	}
	waitPast(next)
	due := claim(t, s, Long, "POST /v1/capture")
	if len(due) != 1 || due[0].Op.ID != probed.ID || due[0].Lease.Fence != 2 || due[0].Lease.Probes != 2 {
		t.Fatalf("the second probe, and nothing before its time: %+v", due)
	}
	if op, _ := s.Get(ctx(t), probed.ID); op.State != ledger.Unknown {
		t.Fatalf("claims moved the operation: %s", op.State)
	}
	if _, err := s.ClaimProbes(ctx(t), ledger.ProbeClaimParams{Limit: 1, Lease: Long}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("a claim without routes: %v", err)
	}
}

// testProbeVerdicts: applied makes the operation succeeded with the
// probe's answer as its replay and the evidence in its history; not
// applied makes it prepared, and the next retry runs it.
func testProbeVerdicts(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	a, n := unknownOn(t, s, "POST /v1/capture"), unknownOn(t, s, "POST /v1/capture")
	byID := map[string]ledger.ProbeLease{}
	for _, cl := range claim(t, s, Long, "POST /v1/capture") {
		byID[cl.Op.ID] = cl.Lease
	}
	answer := &ledger.Response{Status: 200, Header: map[string][]string{"Idempotency-Reconciled": {"true"}},
		Body: []byte(`{"id":"pi_1","status":"captured"}`)}
	op, err := s.ProbeResult(c, byID[a.ID], ledger.ProbeOutcome{Verdict: ledger.Applied, Response: answer,
		ResultRef: "pi_1", Evidence: "probe GET /v1/payment-intents/1 answered 200: applied"})
	if err != nil || op.State != ledger.Succeeded {
		t.Fatalf("applied: %+v %v", op, err)
	}
	got, _ := s.Get(c, a.ID)
	if got.Response == nil || string(got.Response.Body) != string(answer.Body) || got.ResultRef != "pi_1" ||
		http.Header(got.Response.Header).Get("Idempotency-Reconciled") != "true" {
		t.Fatalf("the stored replay: %+v", got)
	}
	if h := events(t, s, a.ID); h[len(h)-1] != "resolved unknown>succeeded "+ledger.ActorReconciler {
		t.Fatalf("history %v", h)
	}
	if op, err = s.ProbeResult(c, byID[n.ID], ledger.ProbeOutcome{Verdict: ledger.NotApplied,
		Evidence: "probe answered 200: not applied"}); err != nil || op.State != ledger.Prepared {
		t.Fatalf("not applied: %+v %v", op, err)
	}
	if r, err := s.Acquire(c, ledger.AcquireParams{ID: n.ID, Lease: Long, Actor: "gw"}); err != nil || !r.Owned() {
		t.Fatalf("the retry after a proof of non-delivery: %+v %v", r, err)
	}
	if _, err := s.ProbeResult(c, byID[n.ID], ledger.ProbeOutcome{Verdict: ledger.Applied, Evidence: "x"}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("applied without an answer: %v", err)
	}
}

// testProbeFencing: a reconciler whose claim lapsed and was taken by
// another is refused its result; one whose operation an operator
// resolved meanwhile is told so.
func testProbeFencing(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	op := unknownOn(t, s, "POST /v1/capture")
	stale := claim(t, s, Lapsing, "POST /v1/capture")
	time.Sleep(2 * time.Millisecond)
	fresh := claim(t, s, Long, "POST /v1/capture")
	if len(stale) != 1 || len(fresh) != 1 || fresh[0].Lease.Fence <= stale[0].Lease.Fence {
		t.Fatalf("claims %+v then %+v", stale, fresh)
	}
	answer := &ledger.Response{Status: 200}
	if _, err := s.ProbeResult(c, stale[0].Lease, ledger.ProbeOutcome{Verdict: ledger.Applied, Response: answer,
		Evidence: "late"}); !errors.Is(err, ledger.ErrStaleOwner) {
		t.Fatalf("a stale reconciler's result: %v", err)
	}
	if _, err := s.Resolve(c, ledger.ResolveParams{ID: op.ID, To: ledger.Failed, Actor: "alice", Note: "checked"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ProbeResult(c, fresh[0].Lease, ledger.ProbeOutcome{Verdict: ledger.NotApplied,
		Evidence: "after the operator"}); !errors.Is(err, ledger.ErrIllegalTransition) {
		t.Fatalf("a result after an operator's resolution: %v", err)
	}
	if got, _ := s.Get(c, op.ID); got.State != ledger.Failed {
		t.Fatalf("the operator's resolution was overwritten: %s", got.State)
	}
}

// testRaceProbeClaims: reconcilers on two handles claim each operation
// once.
func testRaceProbeClaims(t *testing.T, b Backend) {
	s := b.Fresh(t)
	other := s
	if b.Another != nil {
		other = b.Another(t, s)
	}
	for range 12 {
		unknownOn(t, s, "POST /v1/capture")
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := []ledger.Store{s, other}[i%2]
			cs, err := h.ClaimProbes(ctx(t), ledger.ProbeClaimParams{Routes: []string{"POST /v1/capture"}, Limit: 3,
				Lease: Long})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, c := range cs {
				seen[c.Op.ID]++
			}
		}()
	}
	wg.Wait()
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s claimed %d times", id, n)
		}
	}
	if len(seen) != 12 {
		t.Fatalf("%d of 12 claimed by 6 reconcilers of 3 each", len(seen))
	}
}

// testProbeEpisodes: a claim made while an operation was unknown never
// decides a later unknown episode of it (resolved to prepared, re-run,
// lost again): its result is refused, and the new episode is claimable.
func testProbeEpisodes(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	op := unknownOn(t, s, "POST /v1/capture")
	old := claim(t, s, Long, "POST /v1/capture")
	if _, err := s.Resolve(c, ledger.ResolveParams{ID: op.ID, To: ledger.Prepared, Actor: "alice", Note: "retry it"}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Acquire(c, ledger.AcquireParams{ID: op.ID, Lease: Long, Actor: "gw"})
	if err != nil || !r.Owned() {
		t.Fatalf("acquire %+v %v", r, err)
	}
	if _, err := s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "answer lost again"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ProbeResult(c, old[0].Lease, ledger.ProbeOutcome{Verdict: ledger.NotApplied,
		Evidence: "stale: 0 items"}); err == nil {
		t.Fatalf("a claim of the first unknown episode decided the second: %s", got.State)
	}
	if fresh := claim(t, s, Long, "POST /v1/capture"); len(fresh) != 1 {
		t.Fatalf("the second episode is not claimable: %+v", fresh)
	}
}
