package httpidem_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
			op, err := o.store.GetByKey(context.Background(), "acme", "k")
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
	if r := a.post("k", "acme", `{}`); r.status != 201 {
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
