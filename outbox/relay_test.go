package outbox_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/outbox"
)

// TestRelayDelivers: an operation's effects go out in order, each with
// its derived key in the tenant's name, the target's credentials and the
// effect's own headers; the target's reference is kept.
func TestRelayDelivers(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		s := db.Open(t)
		target := newHonouring()
		if _, err := outbox.Enqueue(context.Background(), s, effects("dossier_42:v5", 3)...); err != nil {
			t.Fatal(err)
		}
		round := drain(t, relay(s, serve(t, target)))
		if round.Claimed != 3 || round.Succeeded != 3 {
			t.Fatalf("round %+v", round)
		}
		want := []string{"acme:dossier_42:v5/step-1", "acme:dossier_42:v5/step-2", "acme:dossier_42:v5/step-3"}
		for i, key := range want {
			if target.order[i] != key {
				t.Fatalf("delivered %v, want %v", target.order, want)
			}
			h := target.header[i]
			if h.Get("Authorization") != "Bearer crm-secret" || h.Get("Content-Type") != "application/json" {
				t.Fatalf("delivery %d headers %v", i, h)
			}
		}
		for i, e := range effectsOf(t, s, "dossier_42:v5") {
			if e.State != ledger.Succeeded || e.Attempts != 1 || e.Status != 201 || e.ResultRef == "" ||
				e.ResultRef != "ref-"+string(rune('1'+i)) {
				t.Fatalf("effect %d: %+v", i, e)
			}
		}
	})
}

// TestRelayErrorFamilies: each kind of answer, or its absence, leaves the
// effect where docs/design.md's outcome mapping says.
func TestRelayErrorFamilies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handler http.HandlerFunc
		state   ledger.State
		code    string
		due     bool
	}{
		{"created", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(201) }, ledger.Succeeded, "", false},
		{"a business refusal", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(422) }, ledger.Failed, "http_422", false},
		{"not found", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(404) }, ledger.Failed, "http_404", false},
		// A redirect is not followed: nothing was made, for good.
		{"a redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/v1/x", http.StatusTemporaryRedirect)
		}, ledger.Failed, "http_307", false},
		{"moved", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/v1/x", http.StatusMovedPermanently)
		}, ledger.Failed, "http_301", false},
		{"request timeout", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(408) }, ledger.Prepared, "http_408", true},
		{"a conflict", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(409) }, ledger.Prepared, "http_409", true},
		{"too early", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(425) }, ledger.Prepared, "http_425", true},
		{"the answer's body cut", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(201)
			_, _ = w.Write([]byte(`{"id":`))
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}, ledger.Unknown, "target_body_cut", true},
		{"rate limited", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(429)
		}, ledger.Prepared, "http_429", true},
		{"a server error", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }, ledger.Unknown, "http_500", true},
		{"no answer in time", func(w http.ResponseWriter, r *http.Request) {
			// Past the relay's timeout, then free the server: the body read,
			// the server sees the relay hang up and cancels r's context.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-time.After(time.Minute):
			case <-r.Context().Done():
			}
		}, ledger.Unknown, "target_timeout", true},
		{"reset after the request", func(w http.ResponseWriter, _ *http.Request) {
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		}, ledger.Unknown, "target_reset", true},
	}
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		s := db.Open(t)
		for _, c := range cases {
			url := serve(t, c.handler)
			r := relay(s, url)
			// Patient but for the timeout's own case: a loaded machine must
			// not turn a quick answer into target_timeout.
			timeout := 3 * time.Second
			if c.code == "target_timeout" {
				timeout = 300 * time.Millisecond
			}
			r.Targets["crm"] = outbox.Target{URL: url, Timeout: timeout}
			r.Backoff = func(int) time.Duration { return time.Second }
			key := "family-" + c.name
			if _, err := outbox.Enqueue(context.Background(), s, effects(key, 1)...); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Once(context.Background()); err != nil {
				t.Fatal(err)
			}
			e := effectsOf(t, s, key)[0]
			if e.State != c.state || e.LastError != c.code || e.NextAt.IsZero() != !c.due {
				t.Errorf("%s: %s %q due %v, want %s %q due %t", c.name, e.State, e.LastError, e.NextAt, c.state, c.code, c.due)
			}
			if c.name == "rate limited" && time.Until(e.NextAt) < 100*time.Second {
				t.Errorf("Retry-After 120 was not honoured: due in %v", time.Until(e.NextAt))
			}
		}
		// Nothing listening: nothing was sent, so it was not applied.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "http://" + l.Addr().String()
		l.Close()
		if _, err := outbox.Enqueue(context.Background(), s, effects("family-unreachable", 1)...); err != nil {
			t.Fatal(err)
		}
		if _, err := relay(s, dead).Once(context.Background()); err != nil {
			t.Fatal(err)
		}
		if e := effectsOf(t, s, "family-unreachable")[0]; e.State != ledger.Prepared || e.LastError != "target_unreachable" {
			t.Errorf("unreachable: %s %q", e.State, e.LastError)
		}
	})
}

// TestRelayTest11: the workflow article's test 11 on the outbox, "one
// effect succeeds and the next fails": of four effects the third fails
// (a definite refusal, until an operator mends its cause), or loses its
// answer (sent again with the same key), or meets server errors until it
// waits for an operator. The relay goes no further than the third until it
// succeeds; the resume runs only the third and the fourth. Each step is
// one effect at the target, which honours keys.
func TestRelayTest11(t *testing.T) {
	t.Parallel()
	const third = "acme:dossier_7:v1/step-3"
	for _, c := range []struct {
		name       string
		status     int  // the third's answer while it is broken
		operator   bool // the resume needs an operator's word
		deliveries int  // of the third, in all
	}{
		{"fails", 422, true, 2},
		{"loses its answer", lost, false, 2},
		{"server errors", 500, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
				s := db.Open(t)
				target := newHonouring()
				broken := true
				target.behave = func(key string, n int) int { // called under target.mu
					if key == third && broken && (c.status != lost || n == 1) { // an answer is lost once
						return c.status
					}
					return 0
				}
				if _, err := outbox.Enqueue(context.Background(), s, effects("dossier_7:v1", 4)...); err != nil {
					t.Fatal(err)
				}
				r := relay(s, serve(t, target))
				r.MaxAttempts = 2
				drain(t, r)
				es := effectsOf(t, s, "dossier_7:v1")
				if c.operator {
					if es[0].State != ledger.Succeeded || es[1].State != ledger.Succeeded || es[2].State.Final() &&
						es[2].State != ledger.Failed || es[2].State == ledger.Succeeded || es[3].State != ledger.Prepared ||
						es[3].Attempts != 0 {
						t.Fatalf("after the failure: %v %v %+v %v", es[0].State, es[1].State, es[2], es[3].State)
					}
					target.mu.Lock()
					broken = false
					target.mu.Unlock()
					if _, err := s.ResolveEffect(context.Background(), ledger.EffectResolveParams{ID: es[2].ID,
						Tenant: "acme", To: ledger.Prepared, Actor: "alice", Note: "the CRM is fixed"}); err != nil {
						t.Fatal(err)
					}
					if round := drain(t, r); round.Claimed != 2 || round.Succeeded != 2 {
						t.Fatalf("the resume: %+v", round)
					}
				}
				applied, delivered := target.counts()
				for i, want := range []int{1, 1, c.deliveries, 1} {
					key := "acme:dossier_7:v1/step-" + string(rune('1'+i))
					if applied[key] != 1 || delivered[key] != want {
						t.Fatalf("%s: %d effects, %d deliveries; want 1 and %d", key, applied[key], delivered[key], want)
					}
				}
				for _, e := range effectsOf(t, s, "dossier_7:v1") {
					if e.State != ledger.Succeeded {
						t.Fatalf("%s is %s", e.Name, e.State)
					}
				}
			})
		})
	}
}

// TestRelaysNeverDeliverOneEffectAtOnce: two relays on two store handles,
// eight deliveries each at a time, against a slow target: no key is ever
// in flight twice, and each effect is delivered once.
func TestRelaysNeverDeliverOneEffectAtOnce(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		s := db.Open(t)
		const ops = 60
		for i := range ops {
			if _, err := outbox.Enqueue(context.Background(), s, effects("race-"+string(rune('A'+i%26))+
				string(rune('a'+i/26)), 2)...); err != nil {
				t.Fatal(err)
			}
		}
		target := newHonouring()
		target.hold = 5 * time.Millisecond
		url := serve(t, target)
		var wg sync.WaitGroup
		for _, h := range []ledger.Store{s, db.Open(t)} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := relay(h, url)
				r.Concurrency = 8
				drain(t, r)
			}()
		}
		wg.Wait()
		drain(t, relay(s, url)) // what the two left behind in their last rounds
		applied, delivered := target.counts()
		if len(applied) != 2*ops || target.maxFlight != 1 {
			t.Fatalf("%d keys applied (want %d), at most %d in flight at once", len(applied), 2*ops, target.maxFlight)
		}
		for key, n := range delivered {
			if n != 1 {
				t.Fatalf("%s delivered %d times", key, n)
			}
		}
	})
}

// TestRelayStopsCleanly: Run returns when its context ends, and a bad
// configuration is refused before any claim.
func TestRelayStopsCleanly(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		s := db.Open(t)
		bad := relay(s, "ftp://x")
		if err := bad.Run(context.Background()); err == nil {
			t.Fatal("a relay with a bad target ran")
		}
		slow := relay(s, "http://127.0.0.1:1")
		slow.Targets["crm"] = outbox.Target{URL: "http://127.0.0.1:1", Timeout: time.Minute}
		if err := slow.Run(context.Background()); err == nil {
			t.Fatal("a relay whose timeout outlives its lease ran")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- relay(s, "http://127.0.0.1:1").Run(ctx) }()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return when its context ended")
		}
	})
}

// TestRelayNeverDeliversPastItsLease: a relay claims only what it can
// deliver at once, so no claim waits in a queue while its lease runs
// out. Two relays, two deliveries each at a time, a slow target and a
// short lease: were the second relay to claim effects whose lease lapsed
// before the first sent them, both would deliver them. Each is delivered
// once.
func TestRelayNeverDeliversPastItsLease(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		s := db.Open(t)
		for i := range 20 {
			if _, err := outbox.Enqueue(context.Background(), s, effects("slow-"+string(rune('a'+i)), 1)...); err != nil {
				t.Fatal(err)
			}
		}
		target := newHonouring()
		target.hold = 400 * time.Millisecond
		url := serve(t, target)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, h := range []ledger.Store{s, db.Open(t)} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := relay(h, url)
				r.Concurrency, r.Lease = 2, 3*time.Second
				r.Targets["crm"] = outbox.Target{URL: url, Timeout: time.Second}
				if err := r.Run(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		deadline := time.Now().Add(30 * time.Second)
		for done := 0; done < 20 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			done = 0
			for i := range 20 {
				if es := effectsOf(t, s, "slow-"+string(rune('a'+i))); es[0].State == ledger.Succeeded {
					done++
				}
			}
		}
		time.Sleep(3100 * time.Millisecond) // a lease's length: a lapsed claim would be taken again by now
		cancel()
		wg.Wait()
		applied, delivered := target.counts()
		if len(applied) != 20 || target.maxFlight != 1 {
			t.Fatalf("%d applied, at most %d of one key in flight", len(applied), target.maxFlight)
		}
		for key, n := range delivered {
			if n != 1 {
				t.Fatalf("%s delivered %d times", key, n)
			}
		}
	})
}

// slowClaims returns every claim late, as a slow commit acknowledgement
// (synchronous replication, a loaded disk, a pause) would: the lease is
// already running in the store. Late by the relay's clock, which it steps
// by delay, so that the test waits for nothing and the real lease in the
// store stays far from lapsing, however loaded the machine.
type slowClaims struct {
	ledger.Store
	clock *steppedClock
	delay time.Duration
}

func (s slowClaims) ClaimEffects(ctx context.Context, p ledger.EffectClaimParams) ([]ledger.EffectClaim, error) {
	cs, err := s.Store.ClaimEffects(ctx, p)
	s.clock.step(s.delay)
	return cs, err
}

// SettleEffects returns a turn late when it claimed something.
func (s slowClaims) SettleEffects(ctx context.Context, p ledger.EffectSettle) (ledger.EffectSettled, error) {
	out, err := s.Store.SettleEffects(ctx, p)
	if len(out.Claims) > 0 {
		s.clock.step(s.delay)
	}
	return out, err
}

// steppedClock is the wall clock plus the steps a test has taken.
type steppedClock struct {
	mu    sync.Mutex
	ahead time.Duration
}

func (c *steppedClock) step(d time.Duration) {
	c.mu.Lock()
	c.ahead += d
	c.mu.Unlock()
}

func (c *steppedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.ahead)
}

// TestRelayDeliveryEndsWithinItsLease: a claim that came back too late
// for its delivery to finish within the lease is not sent (it would still
// be in flight when another relay, the lease lapsed, sends it too); it is
// released, and the next relay delivers it, once. The claim comes back,
// by the relay's clock, with 2.5s of its 5s lease left, less than the 3s
// a delivery may take; nothing waits for that time to pass, and the next
// relay starts once the first one has released it (an event). Once claims
// alone; Run claims in its turns.
func TestRelayDeliveryEndsWithinItsLease(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		for _, how := range []string{"Once", "Run"} {
			t.Run(how, func(t *testing.T) { // not in parallel: both relays would claim both effects
				s := db.Open(t)
				if _, err := outbox.Enqueue(context.Background(), s, effects("late-claim-"+how, 1)...); err != nil {
					t.Fatal(err)
				}
				target := newHonouring()
				target.hold = 850 * time.Millisecond // within the timeout
				url := serve(t, target)
				clock := &steppedClock{}
				a := relay(slowClaims{s, clock, 2500 * time.Millisecond}, url)
				a.Now = clock.now
				a.Lease = 5 * time.Second
				a.Targets["crm"] = outbox.Target{URL: url, Timeout: 3 * time.Second}
				if released := lateClaim(t, a, how); released.Outcome.ErrorCode != "lease_too_short" {
					t.Fatalf("the late claim: %+v", released)
				}
				drain(t, relay(db.Open(t), url))
				applied, delivered := target.counts()
				if target.maxFlight != 1 || delivered["acme:late-claim-"+how+"/step-1"] != 1 || len(applied) != 1 {
					t.Fatalf("deliveries %v, at most %d in flight", delivered, target.maxFlight)
				}
			})
		}
	})
}

// lateClaim runs a (a round, or Run until its first delivery is
// recorded, then stopped) and returns that delivery.
func lateClaim(t *testing.T, a *outbox.Relay, how string) outbox.Delivery {
	first := make(chan outbox.Delivery, 8)
	a.OnDelivery = func(d outbox.Delivery) { first <- d }
	if how == "Once" {
		round, err := a.Once(context.Background())
		if err != nil || round.Released != 1 {
			t.Fatalf("the late claim's round: %+v %v", round, err)
		}
		return <-first
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var d outbox.Delivery
	select {
	case d = <-first:
	case <-time.After(time.Minute):
		t.Fatal("the relay delivered nothing")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return d
}

// gated holds each delivery until the test lets its key go, says when
// one has arrived, and knows which have ended.
type gated struct {
	arrived chan string
	mu      sync.Mutex
	gates   map[string]chan struct{}
	ended   map[string]bool
}

func newGated() *gated {
	return &gated{arrived: make(chan string, 16), gates: map[string]chan struct{}{}, ended: map[string]bool{}}
}

func (g *gated) gate(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates[key] == nil {
		g.gates[key] = make(chan struct{})
	}
	return g.gates[key]
}

func (g *gated) hasEnded(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ended[key]
}

func (g *gated) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	_, _ = io.ReadAll(r.Body)
	g.arrived <- key
	defer func() {
		g.mu.Lock()
		g.ended[key] = true
		g.mu.Unlock()
	}()
	select {
	case <-g.gate(key):
		w.WriteHeader(http.StatusCreated)
	case <-r.Context().Done(): // the relay gave up on it
	}
}

// TestRelayStopRecordsEachResultAsItEnds: a stopping relay records a
// delivery's result as soon as that delivery ends, not once the slowest
// one in flight has: held behind it, the result could outlive its lease,
// be refused, and its effect be sent again. Two deliveries are in flight
// when the relay is told to stop; the first one's result is recorded
// while the second is still held at the target.
func TestRelayStopRecordsEachResultAsItEnds(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		s := db.Open(t)
		target := newGated()
		r := relay(s, serve(t, target))
		// Long enough that only a relay waiting for the second delivery
		// sees it end before the first result is recorded: no window.
		r.Lease = 2 * time.Minute
		r.Targets["crm"] = outbox.Target{URL: r.Targets["crm"].URL, Timeout: time.Minute}
		recorded := make(chan outbox.Delivery, 4)
		r.OnDelivery = func(d outbox.Delivery) { recorded <- d }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		var keys []string
		for _, op := range []string{"first", "second"} {
			if _, err := outbox.Enqueue(context.Background(), s, effects(op, 1)...); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, <-target.arrived)
		}
		cancel()
		close(target.gate(keys[0]))
		d := <-recorded
		if target.hasEnded(keys[1]) {
			t.Fatal("the first delivery's result waited for the second delivery")
		}
		if d.Effect.Key != "first/step-1" || d.Recorded != nil || d.Outcome.State != ledger.Succeeded {
			t.Fatalf("the first result: %+v", d)
		}
		close(target.gate(keys[1]))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if d := <-recorded; d.Effect.Key != "second/step-1" || d.Recorded != nil {
			t.Fatalf("the second result: %+v", d)
		}
	})
}
