package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// CommitLog counts a store's commits: each statement sent alone
// autocommits, each batch of steps commits once (at its COMMIT, or at its
// end for a step alone, an implicit transaction). The store's external
// tests count with it too.
type CommitLog struct{ N atomic.Int64 }

// explicit is set on a batch's context once its BEGIN is seen.
type explicit struct{ begun atomic.Bool }

type explicitKey struct{}

// TraceQueryStart counts a statement sent alone.
func (l *CommitLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	l.N.Add(1)
	return ctx
}

// TraceQueryEnd does nothing.
func (l *CommitLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart notes the batch, to tell its kind of transaction.
func (l *CommitLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, explicitKey{}, &explicit{})
}

// TraceBatchQuery counts a batch's COMMIT.
func (l *CommitLog) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	switch d.SQL {
	case "BEGIN":
		ctx.Value(explicitKey{}).(*explicit).begun.Store(true)
	case "COMMIT":
		l.N.Add(1)
	}
}

// TraceBatchEnd counts the implicit transaction of a batch without BEGIN.
func (l *CommitLog) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	if !ctx.Value(explicitKey{}).(*explicit).begun.Load() && d.Err == nil {
		l.N.Add(1)
	}
}

// blocked makes the next step on key wait: another session inserts the key
// and keeps its transaction open until release.
func blocked(t *testing.T, dsn, key string) (release func()) {
	t.Helper()
	return testenv.Hold(t, dsn, `INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, retention_us,
		created_at, updated_at, expires_at) VALUES ('op_blocker', 'acme', $1, '/r', 'f', 'prepared', 1, now(), now(), now())`,
		key).Release
}

// TestConcurrentStepsShareTransactions: with one batch in flight, held on
// a row lock, the 49 steps that queue behind it commit together, each
// answered as if alone.
func TestConcurrentStepsShareTransactions(t *testing.T) {
	c := context.Background()
	var commits CommitLog
	dsn, _ := testenv.PostgresSchema(t)
	s, _ := testStoreAt(t, dsn, Options{Batches: 1, Tracer: &commits})
	// The blocked batch holds its slot until released: its lock wait is a
	// bound (10 min), not a window the 49 goroutines must queue within (on a
	// loaded machine 10 s was passed, the batch given up, its steps run
	// alone: 3 commits).
	s.lockWait = "10min"
	release := blocked(t, dsn, "first")
	errs := make(chan error, 50)
	go func() { _, err := s.Reserve(c, params("first")); errs <- err }()
	testenv.WaitLockWait(t, s.pool)
	before := commits.N.Load()
	var wg sync.WaitGroup
	for i := range 49 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Reserve(c, params("k"+string(rune('A'+i%26))+string(rune('a'+i/26))))
			if err == nil && !r.Created {
				err = errors.New("not created")
			}
			errs <- err
		}()
	}
	for len(s.batch.jobs) < 49 {
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	for range 50 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := commits.N.Load() - before; n != 2 {
		t.Errorf("the blocked batch and 49 queued reservations took %d commits, want 2", n)
	}
}

// TestOneBadStepSparesItsBatch: a statement that fails aborts its batch's
// transaction; the others are run again on their own and succeed, and the
// bad one gets its own error.
func TestOneBadStepSparesItsBatch(t *testing.T) {
	c := context.Background()
	dsn, _ := testenv.PostgresSchema(t)
	s, _ := testStoreAt(t, dsn, Options{Batches: 1})
	s.lockWait = "10min" // a bound until release(), never a window (see TestConcurrentStepsShareTransactions)
	holder := params("holder")
	holder.ConcurrencyKey = "prod"
	if _, err := s.Reserve(c, holder); err != nil {
		t.Fatal(err)
	}
	waiting := params("waiting")
	waiting.ConcurrencyKey = "prod"
	waiting.Lease = 0
	if _, err := s.Reserve(c, waiting); err != nil { // prepared, no approval: it does not hold the group
		t.Fatal(err)
	}
	prep, err := s.GetByKey(c, ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients, Key: "waiting"})
	if err != nil {
		t.Fatal(err)
	}
	release := blocked(t, dsn, "first")
	done := make(chan error, 1)
	go func() { _, err := s.Reserve(c, params("first")); done <- err }()
	testenv.WaitLockWait(t, s.pool)
	results := make(chan error, 2)
	go func() { // the bad one: acquiring it would break the concurrency group
		_, err := s.Acquire(c, ledger.AcquireParams{ID: prep.ID, Lease: time.Minute, Actor: "t"})
		results <- err
	}()
	go func() { _, err := s.Reserve(c, params("good")); results <- err }()
	for len(s.batch.jobs) < 2 {
		time.Sleep(time.Millisecond)
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var locked, ok int
	for range 2 {
		switch err := <-results; {
		case errors.Is(err, ledger.ErrConcurrencyLocked):
			locked++
		case err == nil:
			ok++
		default:
			t.Fatal(err)
		}
	}
	if locked != 1 || ok != 1 {
		t.Fatalf("locked %d, ok %d", locked, ok)
	}
	if _, err := s.GetByKey(c, ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients, Key: "good"}); err != nil {
		t.Fatalf("the good step of a failed batch: %v", err)
	}
}

func params(key string) ledger.ReserveParams {
	return ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute, Tenant: "acme", Key: key,
		Route: "/r", Fingerprint: "f", Lease: time.Hour, Retention: time.Hour, Actor: "gw"}
}

// TestBlockedStepRunsAlone: a step that waits on a row lock past lockWait
// leaves its batch and waits on its own; the steps queued behind it go on.
func TestBlockedStepRunsAlone(t *testing.T) {
	c := context.Background()
	dsn, _ := testenv.PostgresSchema(t)
	s, _ := testStoreAt(t, dsn, Options{Batches: 1})
	release := blocked(t, dsn, "first")
	defer release()
	done := make(chan error, 1)
	go func() { _, err := s.Reserve(c, params("first")); done <- err }()
	testenv.WaitLockWait(t, s.pool)
	for i := range 5 {
		if _, err := s.Reserve(c, params(fmt.Sprint("after-", i))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the blocked step ended while its lock was held: %v", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the blocked step, once the lock was gone: %v", err)
	}
}

// TestMergedStepsAnswerEachStep: reservations and completions queued
// behind a blocked batch run as one statement of each kind, and each step
// is answered as if alone: a key reserved twice in the batch is created
// once and found once, each with its kind and namespace; each completion
// stores its own answer; a stale owner among them is refused, and changes
// nothing.
func TestMergedStepsAnswerEachStep(t *testing.T) {
	c := context.Background()
	var sent sqlLog
	dsn, _ := testenv.PostgresSchema(t)
	s, _ := testStoreAt(t, dsn, Options{Batches: 1, Tracer: &sent})
	var leases []ledger.Lease
	for i := range 6 {
		r, err := s.Reserve(c, params(fmt.Sprint("done-", i)))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, *r.Lease)
	}
	stale := leases[5]
	stale.Fence++
	s.lockWait = "10min" // a bound until release(), never a window (see TestConcurrentStepsShareTransactions)
	release := blocked(t, dsn, "first")
	go func() { _, _ = s.Reserve(c, params("first")) }()
	testenv.WaitLockWait(t, s.pool)
	type answer struct {
		i   int
		r   ledger.Reservation
		op  *ledger.Operation
		err error
	}
	answers := make(chan answer, 11)
	for i := range 5 {
		go func() {
			op, err := s.Complete(c, leases[i], ledger.Outcome{State: ledger.Succeeded,
				Response: &ledger.Response{Status: 201, Body: []byte(fmt.Sprint(`{"n":`, i, `}`))}})
			answers <- answer{i: i, op: op, err: err}
		}()
	}
	go func() {
		_, err := s.Complete(c, stale, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}})
		answers <- answer{i: 5, err: err}
	}()
	for i := range 5 {
		go func() {
			p := params(fmt.Sprint("new-", i%4)) // new-0 twice
			p.Kind, p.Namespace = ledger.KindConsumer, ledger.ConsumerNamespace("billing")
			r, err := s.Reserve(c, p)
			answers <- answer{i: 6 + i, r: r, err: err}
		}()
	}
	for len(s.batch.jobs) < 11 {
		time.Sleep(time.Millisecond)
	}
	release()
	created := map[string]int{}
	for range 11 {
		a := <-answers
		switch {
		case a.i < 5:
			if a.err != nil || a.op.State != ledger.Succeeded || a.op.ID != leases[a.i].OpID {
				t.Fatalf("completion %d: %+v %v", a.i, a.op, a.err)
			}
		case a.i == 5:
			if !errors.Is(a.err, ledger.ErrStaleOwner) {
				t.Fatalf("a stale owner's completion among merged ones: %v", a.err)
			}
		default:
			if a.err != nil || a.r.Op.Kind != ledger.KindConsumer || a.r.Op.Namespace != "consumer/billing" {
				t.Fatalf("reservation %d: %+v %v", a.i, a.r.Op, a.err)
			}
			if a.r.Created {
				created[a.r.Op.Key]++
			}
		}
	}
	if len(created) != 4 || created["new-0"] != 1 {
		t.Fatalf("created %v, want each of four keys once", created)
	}
	for i := range 5 {
		op, err := s.Get(c, leases[i].OpID)
		if err != nil || string(op.Response.Body) != fmt.Sprint(`{"n":`, i, `}`) {
			t.Fatalf("stored answer %d: %+v %v", i, op, err)
		}
	}
	if op, err := s.Get(c, stale.OpID); err != nil || op.State != ledger.Executing {
		t.Fatalf("the stale owner's operation: %+v %v", op, err)
	}
	if !sent.contains("FROM input ORDER BY tenant, namespace, key") ||
		!sent.contains("UPDATE idem_operations o SET") {
		t.Fatal("the reservations and the completions were not merged")
	}
}
