package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// TestExpireNeedsALapsedLease: the reserve path decides to expire a lease it
// read as lapsed; if the lease is live by the time the statement runs, the
// statement's own guard must refuse.
func TestExpireNeedsALapsedLease(t *testing.T) {
	c := context.Background()
	s, r := testStore(t, Options{})
	_, err := driver{s: s}.Apply(c, steps.Change{Step: ledger.StepExpire, From: ledger.Executing, To: ledger.Unknown,
		ID: r.Op.ID, Actor: ledger.ActorLeaseExpiry, ErrorCode: "lease_expired"})
	if !errors.Is(err, steps.ErrGuard) {
		t.Fatalf("expiring a live lease: %v", err)
	}
}

// TestDurability: by default no statement relaxes synchronous_commit;
// with durability=relaxed the owner steps alone do, and the session keeps
// waiting for the disk for the next reservation.
func TestDurability(t *testing.T) {
	c := context.Background()
	for _, relaxed := range []bool{false, true} {
		var sent sqlLog
		s, r := testStore(t, Options{MaxConns: 1, Relaxed: relaxed, Tracer: &sent})
		if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}}); err != nil {
			t.Fatal(err)
		}
		if got := sent.contains("off"); got != relaxed {
			t.Fatalf("relaxed=%v: a completion relaxed synchronous_commit: %v", relaxed, got)
		}
		var mode string
		if err := s.pool.QueryRow(c, "SHOW synchronous_commit").Scan(&mode); err != nil || mode != "on" {
			t.Fatalf("synchronous_commit after a completion: %q, %v", mode, err)
		}
	}
}

// TestStrictOverridesAServerThatDoesNotWait: a database, role or session
// default of synchronous_commit = off does not make a strict store lazy;
// a relaxed one leaves the server's setting as it is.
func TestStrictOverridesAServerThatDoesNotWait(t *testing.T) {
	c := context.Background()
	for _, relaxed := range []bool{false, true} {
		dsn, _ := testenv.PostgresSchema(t)
		s, r := testStoreAt(t, dsn+"&options=-c%20synchronous_commit%3Doff", Options{MaxConns: 1, Relaxed: relaxed})
		if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}}); err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{false: "on", true: "off"}[relaxed]
		var mode string
		if err := s.pool.QueryRow(c, "SHOW synchronous_commit").Scan(&mode); err != nil || mode != want {
			t.Fatalf("relaxed=%v on a server that does not wait: synchronous_commit %q, %v; want %q", relaxed, mode, err, want)
		}
	}
}

// sqlLog records the statements a store sends.
type sqlLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sql = append(l.sql, d.SQL)
	return ctx
}

func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *sqlLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (l *sqlLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sql = append(l.sql, d.SQL)
}

func (l *sqlLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (l *sqlLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.sql, func(q string) bool { return strings.Contains(q, s) })
}

// TestDurabilityDSN: durability is read from the DSN and never reaches the
// server as a setting.
func TestDurabilityDSN(t *testing.T) {
	dsn, _ := testenv.PostgresSchema(t)
	for _, c := range []struct {
		param   string
		relaxed bool
		ok      bool
	}{{"strict", false, true}, {"relaxed", true, true}, {"lazy", false, false}} {
		s, err := Open(context.Background(), dsn+"&durability="+c.param, Options{})
		if !c.ok {
			if err == nil {
				s.Close()
				t.Fatalf("durability=%s accepted", c.param)
			}
			continue
		}
		if err != nil {
			t.Fatalf("durability=%s: %v", c.param, err)
		}
		if s.relaxed != c.relaxed {
			t.Errorf("durability=%s: relaxed=%v", c.param, s.relaxed)
		}
		s.Close()
	}
}

// TestConnectionLostMidStep: a connection cut while a step waits on the
// server (here for a row lock) is ErrUnavailable, not an internal error.
// Whether it committed is unknown to the caller (the server goes on with a
// statement whose client has gone); the owner's retry of the same step
// succeeds either way, and the operation moves once.
func TestConnectionLostMidStep(t *testing.T) {
	c := context.Background()
	dsn, _ := testenv.PostgresSchema(t)
	u, _ := url.Parse(dsn)
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	s, r := testStoreAt(t, u.String(), Options{MaxConns: 2})
	hold := testenv.Hold(t, dsn, `SELECT 1 FROM idem_operations WHERE id = $1 FOR UPDATE`, r.Op.ID) // the row lock
	errc := make(chan error, 1)
	go func() {
		_, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}})
		errc <- err
	}()
	testenv.WaitLockWait(t, hold.Conn)
	proxy.Cut()
	err := <-errc
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("a step whose connection was lost: %v, want %v", err, ledger.ErrUnavailable)
	}
	hold.Release()
	op, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}})
	if err != nil || op.State != ledger.Succeeded {
		t.Fatalf("the owner's retry after a lost step: %+v, %v", op, err)
	}
	h, err := s.History(c, r.Op.ID)
	if err != nil || len(h) != 2 {
		t.Fatalf("history after a lost step and its retry: %+v, %v", h, err)
	}
}

// testStore opens a migrated store on a fresh schema, and reserves one key.
func testStore(t *testing.T, opts Options) (*Store, ledger.Reservation) {
	t.Helper()
	dsn, _ := testenv.PostgresSchema(t)
	return testStoreAt(t, dsn, opts)
}

// testStoreAt is testStore on a schema already made.
func testStoreAt(t *testing.T, dsn string, opts Options) (*Store, ledger.Reservation) {
	t.Helper()
	c := context.Background()
	s, err := Open(c, dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(c); err != nil {
		t.Fatal(err)
	}
	r, err := s.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "k", Route: "/r", Fingerprint: "f",
		Lease: time.Hour, Retention: time.Hour, Actor: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

// TestLostRepliesAreTold: an error that may hide a committed step (the
// connection lost after the statement was sent) is ErrReplyLost as well
// as ErrUnavailable; one from a statement never sent, or refused by the
// server, is not: nothing was made, and repeating it is pointless.
func TestLostRepliesAreTold(t *testing.T) {
	for _, c := range []struct {
		err       error
		maybeMade bool
	}{
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("read: %w", net.ErrClosed), true},
		{&pgconn.ConnectError{}, false},
		{&pgconn.PgError{Code: "53100"}, false}, // disk full: the statement failed
		{&pgconn.PgError{Code: "25006"}, false}, // read-only
	} {
		err := mapErr("step", c.err)
		if !errors.Is(err, ledger.ErrUnavailable) || errors.Is(err, ledger.ErrReplyLost) != c.maybeMade {
			t.Errorf("%v: %v; want unavailable, reply lost %v", c.err, err, c.maybeMade)
		}
	}
}

// TestDriverWordsAreNeverShown (issue 24, 7.6): a value the database
// refuses is ErrInvalid (a 422 whose detail is the error's text), or
// ErrNotFound for a character it cannot hold (only a value looked up can
// carry one: every value written is checked first); the driver's message,
// which may quote the value, stays out of the text, and in the chain for
// errors.As.
func TestDriverWordsAreNeverShown(t *testing.T) {
	for _, c := range []struct {
		code string
		kind error
	}{
		{"22021", ledger.ErrNotFound}, {"22P05", ledger.ErrNotFound},
		{"22001", ledger.ErrInvalid}, {"23514", ledger.ErrInvalid},
	} {
		pgErr := &pgconn.PgError{Code: c.code, Message: `invalid byte sequence for encoding "UTF8": 0x00`}
		err := mapErr("step", pgErr)
		var got *pgconn.PgError
		if !errors.Is(err, c.kind) || strings.Contains(err.Error(), "UTF8") || strings.Contains(err.Error(), "SQLSTATE") ||
			!errors.As(err, &got) || got.Code != c.code {
			t.Errorf("%s: %v; want %v, no driver words, the PgError in the chain", c.code, err, c.kind)
		}
	}
}

// TestSilentServerIsUnavailable (issue 34, item 18): a server that stops
// answering (the connections stay open, nothing comes back) makes a step
// ErrUnavailable, never an internal error: at the batch's own bound, and
// at the caller's when it has one (the request's). It was
// "batch: timeout: context deadline exceeded", a 500 after 31.5 s.
func TestSilentServerIsUnavailable(t *testing.T) {
	dsn, _ := testenv.PostgresSchema(t)
	u, _ := url.Parse(dsn)
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr
	patient, _ := testStoreAt(t, u.String(), Options{MaxConns: 2})
	patient.batchTimeout = time.Hour // set before any batch of its runs: no race
	brief, _ := testStoreAt(t, u.String(), Options{MaxConns: 2})
	brief.batchTimeout = 200 * time.Millisecond
	// Before the stores close: every connection cut and refused, so that
	// neither waits for a batch or a dial the silence holds.
	t.Cleanup(proxy.Down)
	reserve := func(ctx context.Context, s *Store, key string) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := s.Reserve(ctx, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute, Tenant: "acme", Key: key, Route: "/r", Fingerprint: "f",
				Lease: time.Hour, Retention: time.Hour, Actor: "gw"})
			errc <- err
		}()
		return errc
	}
	proxy.Silence()
	// A caller without a bound is answered at the batch's.
	if err := <-reserve(context.Background(), brief, "unbounded"); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("a silent server, past the batch's bound: %v; want %v", err, ledger.ErrUnavailable)
	}
	// The guard is no window: the batch's own bound is an hour, and a call
	// still waiting a minute past its caller's bound has ignored it.
	bounded, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	select {
	case err := <-reserve(bounded, patient, "bounded"):
		if !errors.Is(err, ledger.ErrUnavailable) || !errors.Is(err, ledger.ErrReplyLost) {
			t.Fatalf("a silent server, within the caller's bound: %v; want unavailable, reply lost", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a step still waits for a silent server a minute past its caller's bound")
	}
}
