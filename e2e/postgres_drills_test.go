package e2e

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
)

// The PostgreSQL drills: the store's server crashes under load, and one of
// several gateway instances dies in the middle of a storm. Effects are
// counted at the ops API.

// answered is the first answer each key got, and how many answers were
// held past the outage's start (recorded once the store came back).
type answered struct {
	mu   sync.Mutex
	keys map[string]reply
	held int
}

func (a *answered) put(key string, r reply, took time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keys[key] = r
	if r.status == 201 && took > 400*time.Millisecond {
		a.held++
	}
}

// load sends new keys from workers until stop is closed; wait returns
// once every request sent has its answer.
func (d *drill) load(workers int, stop <-chan struct{}, sent *atomic.Int64) (out *answered, wait func()) {
	out = &answered{keys: map[string]reply{}}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				start := time.Now()
				r := d.keyed("/v1/tickets", key, ticket("", key))
				out.put(key, r, time.Since(start))
				sent.Add(1)
				if r.status == 503 {
					time.Sleep(20 * time.Millisecond) // a client backs off; the load stays bounded
				}
			}
		}()
	}
	return out, wg.Wait
}

// TestDrillPostgresCrashUnderLoad: a private PostgreSQL stopped with -m
// immediate (a crash: no checkpoint, no goodbye) while four clients write,
// then restarted. Every key answered 2xx replays that answer byte for
// byte, no key has two effects, and the gateway recovers without a
// restart. The ticket route's lease (30s) outlasts the outage, so an
// answer held while the store is away is recorded once it is back.
func TestDrillPostgresCrashUnderLoad(t *testing.T) {
	t.Parallel()
	pg := testenv.PrivatePostgres(t)
	d := newDrill(t, setup{storeDSN: pg.DSN, ticketLease: "30s"})
	stop := make(chan struct{})
	var sent atomic.Int64
	first, wait := d.load(4, stop, &sent)
	waitFor(t, "writes before the crash", func() bool { return sent.Load() >= 40 })
	pg.Crash()
	time.Sleep(500 * time.Millisecond)
	pg.Start()
	at := sent.Load()
	waitFor(t, "writes after the restart", func() bool { return sent.Load() >= at+40 })
	close(stop)
	wait()
	d.waitReady(200)
	executions, created, refused := 0, 0, 0
	first.mu.Lock()
	defer first.mu.Unlock()
	for key, r := range first.keys {
		again := d.keyed("/v1/tickets", key, ticket("", key))
		switch {
		case r.status == 201:
			created++
			executions++
			if again.status != 201 || again.body != r.body || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("%s was answered 201 and now: %+v", key, again)
			}
		case r.status == 503 && problemCode(r) == "store_unavailable":
			refused++
			if again.status == 201 && again.header.Get("Idempotent-Replayed") == "" {
				executions++ // it runs now, for the first time
			} else if problemCode(again) != "in_progress" {
				// A reservation whose reply the crash lost: its owner is
				// nobody, and its lease will make it unknown.
				t.Fatalf("%s refused during the crash, then: %+v", key, again)
			}
		default:
			t.Fatalf("%s: %+v", key, r)
		}
	}
	if refused+first.held == 0 {
		t.Fatal("no request met the crash")
	}
	d.wantEffects("tickets_created", executions)
	t.Logf("%d keys: %d answered 201 and replayed (%d held through the outage), %d refused during it",
		len(first.keys), created, first.held, refused)
}

// TestDrillStormAcrossInstances: three gateway instances on one
// PostgreSQL, 200 copies of one request spread across them, and one
// instance SIGKILLed in the middle of the storm: one effect, and every 2xx
// answer is the owner's, byte for byte, replayable from every instance
// left. When the one killed is the owner, nobody gets a 2xx: the
// operation becomes unknown, and still one effect. The kill lands once
// the storm has begun and while the owner's write is known to be in
// flight at the API, unanswered (not at a request count, which a loaded
// machine reaches after the owner's answer).
func TestDrillStormAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, killOwner := range []bool{false, true} {
		t.Run(map[bool]string{false: "kill another", true: "kill the owner"}[killOwner], func(t *testing.T) {
			t.Parallel()
			dsn, _ := testenv.PostgresSchema(t)
			d := newDrill(t, setup{storeDSN: dsn, upstreamTimeout: "1m"})
			gws := []*testenv.Process{d.gw, d.startGateway(0), d.startGateway(0)}
			d.hold(1) // the owner's write, until the kill has landed
			body := ticket("", "storm")
			owner := make(chan reply, 1)
			go func() {
				owner <- do("POST", gws[0].URL+"/v1/tickets", body, "Authorization", "Bearer "+token, "Idempotency-Key", "storm")
			}()
			d.waitInFlight(1)
			var mu sync.Mutex
			var ok []reply
			var sent atomic.Int64
			stormed := make(chan struct{})
			go func() {
				defer close(stormed)
				concurrently(10, func(w int) {
					for i := range 20 {
						n := w*20 + i
						sent.Add(1)
						r := do("POST", gws[n%3].URL+"/v1/tickets", body, "Authorization", "Bearer "+token, "Idempotency-Key", "storm")
						if r.err == nil && r.status/100 == 2 {
							mu.Lock()
							ok = append(ok, r)
							mu.Unlock()
						}
						time.Sleep(40 * time.Millisecond)
					}
				})
			}()
			waitFor(t, "the storm to begin", func() bool { return sent.Load() >= 10 })
			d.killWhileInFlight(gws[map[bool]int{false: 1, true: 0}[killOwner]], func() bool { return len(owner) > 0 })
			d.release()
			<-stormed
			first := <-owner
			waitFor(t, "the write to end at the API", func() bool { return d.effects()["tickets_created"] == 1 })
			survivor := gws[2]
			if killOwner {
				if first.err == nil || len(ok) > 0 {
					t.Fatalf("the owner was killed, yet: owner %+v, %d answers 2xx", first, len(ok))
				}
				d.gw = survivor
				r := d.untilSettled("/v1/tickets", "storm", body)
				want(t, r, 409, "outcome_unknown")
			} else {
				want(t, first, 201, "")
				for _, r := range append(ok, do("POST", survivor.URL+"/v1/tickets", body, "Authorization", "Bearer "+token,
					"Idempotency-Key", "storm"), do("POST", gws[0].URL+"/v1/tickets", body, "Authorization", "Bearer "+token,
					"Idempotency-Key", "storm")) {
					if r.body != first.body {
						t.Fatalf("a 2xx answer other than the owner's: %q, owner %q", r.body, first.body)
					}
				}
			}
			d.wantEffects("tickets_created", 1)
			t.Logf("%d answers 2xx during the storm", len(ok))
		})
	}
}
