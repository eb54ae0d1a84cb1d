package httpidem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/sqlite"
)

// outage is a real store that the handler can make unavailable for a
// while: a SQLite file made immutable, or a PostgreSQL server whose
// connections are cut and refused.
type outage struct {
	store ledger.Store
	down  func()
	up    func()
}

var outages = map[string]func(t *testing.T) outage{
	"sqlite": func(t *testing.T) outage {
		path := filepath.Join(t.TempDir(), "l.db")
		s := dbtest.SQLiteAt(t, path)
		var mu sync.Mutex
		var undo func()
		return outage{store: s, down: func() {
			mu.Lock()
			defer mu.Unlock()
			undo = testenv.Immutable(t, path, path+"-wal")
		}, up: func() {
			mu.Lock()
			defer mu.Unlock()
			undo()
		}}
	},
	"postgres": func(t *testing.T) outage {
		u, _ := url.Parse(dbtest.PostgresDSN(t))
		proxy := testenv.NewProxy(t, u.Host)
		u.Host = proxy.Addr
		s := dbtest.PostgresAt(t, u.String(), roomy.Postgres)
		return outage{store: s, down: proxy.Down, up: proxy.Up}
	},
}

// roomy is the options of the stores these tests open: a PostgreSQL pool
// of 16 connections.
var roomy = dbtest.Options{Postgres: postgres.Options{MaxConns: 16}}

// logs collects what the middleware logs.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logs) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// TestRecordRetriedWhileStoreUnavailable: the store goes away while the
// handler runs and comes back 300 ms later. The completion is retried
// while the answer is held, so the client's 201 is recorded, and its retry
// replays it.
func TestRecordRetriedWhileStoreUnavailable(t *testing.T) {
	for name, mk := range outages {
		t.Run(name, func(t *testing.T) {
			o := mk(t)
			var log logs
			a := newApp(t, o.store, httpidem.Options{Logger: log.logger()})
			a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
				o.down()
				time.AfterFunc(300*time.Millisecond, o.up)
				w.WriteHeader(201)
				w.Write([]byte(`{"ticket":"T-1"}`))
			}
			first := a.post("k", "acme", `{"title":"x"}`)
			if first.status != 201 {
				t.Fatalf("first: %+v", first)
			}
			op, err := o.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
				Key: "k"})
			if err != nil || op.State != ledger.Succeeded {
				t.Fatalf("the answer the client saw is not recorded: %+v, %v", op, err)
			}
			again := a.post("k", "acme", `{"title":"x"}`)
			if again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" || a.effects.Load() != 1 {
				t.Fatalf("retry: %+v, %d effects", again, a.effects.Load())
			}
			if !strings.Contains(log.String(), "store unavailable, retrying") {
				t.Errorf("the retries were not logged: %s", log.String())
			}
		})
	}
}

// TestAnswerUnrecordedPastDeadline: a store that stays away past the
// recording deadline: the client gets the upstream's answer (the effect
// happened), the log says answer_unrecorded, and the operation becomes
// unknown when its lease lapses: never a second effect.
func TestAnswerUnrecordedPastDeadline(t *testing.T) {
	o := outages["sqlite"](t)
	var log logs
	a := newApp(t, o.store, httpidem.Options{Logger: log.logger(), RecordDeadline: 200 * time.Millisecond,
		Lease: 500 * time.Millisecond})
	a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
		o.down()
		w.WriteHeader(201)
	}
	// The client is told that its answer is the only record of it
	// (issue 34, 19): its retries will hear outcome_unknown.
	if r := a.post("k", "acme", `{}`); r.status != 201 || r.header.Get(contract.HeaderUnrecorded) != "true" {
		t.Fatalf("first: %+v", r)
	}
	if !strings.Contains(log.String(), `"msg":"answer_unrecorded"`) {
		t.Fatalf("no answer_unrecorded in the log: %s", log.String())
	}
	o.up()
	time.Sleep(600 * time.Millisecond)
	if _, err := o.store.ExpireLeases(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	r := a.post("k", "acme", `{}`)
	if r.status != 409 || problemCode(t, r) != "outcome_unknown" || a.effects.Load() != 1 {
		t.Fatalf("retry after an unrecorded answer: %+v, %d effects", r, a.effects.Load())
	}
}

// TestRelaxedStoreHasNoReplayCache: the replay cache holds only durable
// state, so with durability=relaxed there is none: a replay needs the
// store.
func TestRelaxedStoreHasNoReplayCache(t *testing.T) {
	t.Parallel()
	s := dbtest.SQLite(t, sqlite.Options{Relaxed: true})
	a := newApp(t, s, httpidem.Options{})
	if r := a.post("k", "acme", `{}`); r.status != 201 {
		t.Fatalf("first: %+v", r)
	}
	s.Close()
	if r := a.post("k", "acme", `{}`); r.status != 503 || problemCode(t, r) != "store_unavailable" {
		t.Fatalf("a relaxed store's completion was cached: %+v", r)
	}
}

// TestReserveFailureLogged: a reservation the store cannot make is a 503
// for the client and an error line for the operator.
func TestReserveFailureLogged(t *testing.T) {
	t.Parallel()
	s := dbtest.SQLite(t)
	var log logs
	a := newApp(t, s, httpidem.Options{Logger: log.logger()})
	s.Close()
	if r := a.post("k", "acme", `{}`); r.status != 503 || problemCode(t, r) != "store_unavailable" {
		t.Fatalf("%+v", r)
	}
	if !strings.Contains(log.String(), `"msg":"reserve"`) || !strings.Contains(log.String(), "store closed") {
		t.Fatalf("the failed reservation was not logged: %s", log.String())
	}
}

// TestLeaseLapsedDuringOutage: the store goes away while the handler runs
// and stays away for longer than the lease, shorter than the recording
// deadline, while a lease sweep runs all along (as every instance's does).
// The sweep makes the operation unknown the moment the store is back; the
// owner, still retrying its completion with the upstream's answer in
// hand, settles it: the client's 201 is recorded, and every retry replays
// it (issue 24, item 7.10).
func TestLeaseLapsedDuringOutage(t *testing.T) {
	for name, mk := range outages {
		t.Run(name, func(t *testing.T) {
			o := mk(t)
			var log logs
			a := newApp(t, o.store, httpidem.Options{Logger: log.logger(), Lease: 300 * time.Millisecond,
				RecordDeadline: 10 * time.Second})
			sweeping(t, o.store)
			a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
				o.down()
				time.AfterFunc(time.Second, o.up)
				w.WriteHeader(201)
				w.Write([]byte(`{"ticket":"T-1"}`))
			}
			first := a.post("k", "acme", `{"title":"x"}`)
			op, err := o.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
				Key: "k"})
			if first.status != 201 || err != nil || op.State != ledger.Succeeded {
				t.Fatalf("answered %+v, recorded %+v (%v)\n%s", first, op, err, log.String())
			}
			again := a.post("k", "acme", `{"title":"x"}`)
			if again.status != 201 || again.body != first.body || a.effects.Load() != 1 {
				t.Fatalf("retry: %+v, %d effects", again, a.effects.Load())
			}
		})
	}
}

// sweeping runs a lease sweep every 10 ms until the test ends, as the
// maintenance plane of every gateway instance does; failures (the store
// is away) are the test's point, and ignored.
func sweeping(t *testing.T, s ledger.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = s.ExpireLeases(ctx, 10)
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// waitSwept waits until the sweep has made the operation id unknown; a
// handler calls it, so it says what failed rather than ending the test.
func waitSwept(t *testing.T, s ledger.Store, id string) {
	t.Helper()
	if !until(func() bool {
		got, err := s.Get(context.Background(), id)
		return err == nil && got.State == ledger.Unknown
	}) {
		t.Errorf("%s was never swept", id)
	}
}

// TestLapsedThenResolvedMeanwhile: the store is away for longer than the
// lease while the handler runs; once it is back, the sweep makes the
// operation unknown and an operator resolves it, before the owner
// records the upstream's answer. The owner's completion is fenced out,
// and its client gets what every retry gets, the operation's final word,
// never an answer the store does not hold.
func TestLapsedThenResolvedMeanwhile(t *testing.T) {
	o := outages["sqlite"](t)
	events := ledger.NewEventBatcher(o.store, 0, nil)
	a := newApp(t, o.store, httpidem.Options{Lease: 300 * time.Millisecond, RecordDeadline: 10 * time.Second,
		Audit: events})
	sweeping(t, o.store)
	ctx := context.Background()
	a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
		o.down()
		time.Sleep(600 * time.Millisecond)
		o.up()
		op := httpidem.Current(r)
		waitSwept(t, o.store, op.OperationID())
		if _, err := o.store.Resolve(ctx, ledger.ResolveParams{ID: op.OperationID(), To: ledger.Succeeded, Actor: "alice",
			Note: "found it at the upstream", Response: &ledger.Response{Status: 200, Body: []byte(`{"ticket":"T-found"}`)}}); err != nil {
			t.Error(err)
		}
		w.WriteHeader(201)
		w.Write([]byte(`{"ticket":"T-1"}`))
	}
	first := a.post("k", "acme", `{"title":"x"}`)
	again := a.post("k", "acme", `{"title":"x"}`)
	if first.status != 200 || first.body != `{"ticket":"T-found"}` || again.status != first.status || again.body != first.body {
		t.Fatalf("the client got %d %s, its retry %d %s", first.status, first.body, again.status, again.body)
	}
	// The log names the answer the store does not hold, for whoever
	// looks into the operation.
	lost := (&ledger.Response{Body: []byte(`{"ticket":"T-1"}`)}).SHA256()
	es := storyOf(t, o.store, events, first.header.Get("Idempotency-Operation"))
	if !slices.ContainsFunc(es, func(e audit.Event) bool {
		return e.Kind == audit.AnswerUnrecorded && e.UpstreamStatus == 201 && e.ResponseSHA256 == lost
	}) {
		t.Fatalf("no answer_unrecorded naming the upstream's answer: %+v", es)
	}
}

// TestLapsedWithTheStoreUp: a lease that lapses while the store is up (its
// heartbeats refused for another reason, as for an owner paused past its
// lease) is the expiry's: the owner's late answer is not recorded, and its
// client hears what every retry hears, outcome_unknown, never a 201 the
// store does not hold. An answer that meant unknown anyway (a 500) stands.
func TestLapsedWithTheStoreUp(t *testing.T) {
	t.Parallel()
	s := dbtest.SQLite(t)
	a := newApp(t, noHeartbeats{s}, httpidem.Options{Lease: 200 * time.Millisecond})
	sweeping(t, s)
	a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
		waitSwept(t, s, httpidem.Current(r).OperationID()) // the owner, paused past its lease
		if n == 1 {
			w.WriteHeader(201)
			return
		}
		w.WriteHeader(500)
		w.Write([]byte("upstream broke"))
	}
	first := a.post("k", "acme", `{}`)
	again := a.post("k", "acme", `{}`)
	if first.status != 502 || problemCode(t, first) != "outcome_unknown" || again.status != 409 ||
		problemCode(t, again) != "outcome_unknown" || a.effects.Load() != 1 {
		t.Fatalf("the client got %+v, its retry %+v", first, again)
	}
	if broke := a.post("k2", "acme", `{}`); broke.status != 500 || broke.body != "upstream broke" {
		t.Fatalf("an answer meaning unknown: %+v", broke)
	}
}

// noHeartbeats is a store that refuses every heartbeat, though it is up.
type noHeartbeats struct{ ledger.Store }

func (noHeartbeats) Heartbeat(context.Context, ledger.Lease, time.Duration) (ledger.Lease, error) {
	return ledger.Lease{}, errors.New("heartbeat refused")
}
