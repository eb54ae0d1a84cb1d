package storetest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// Tx is a caller's own transaction on a store's database, as a Go service
// holds one around its business write, with the store's steps bound to it
// (the store's Tx method).
type Tx struct {
	Steps ledger.Steps
	// Write makes the service's own business write: a row named id in a
	// table of its own.
	Write    func(id string) error
	Commit   func() error
	Rollback func() error
}

// needTx skips a test of a caller's transaction when the backend opens
// none (a store that offers no Tx).
func needTx(t *testing.T, b Backend) {
	if b.Begin == nil || b.Rows == nil {
		t.Skip("the backend opens no caller's transaction (Backend.Begin, Backend.Rows)")
	}
}

// runTx runs the tests of steps bound to a caller's transaction.
func runTx(t *testing.T, b Backend) {
	t.Run("TxRollbackUndoesAll", inParallel(b, testTxRollback))
	t.Run("TxCommitKeepsAll", inParallel(b, testTxCommit))
	t.Run("TxCompleteJoins", inParallel(b, testTxCompleteJoins))
	t.Run("TxFenced", inParallel(b, testTxFenced))
	t.Run("TxOneWinner", inParallel(b, testTxOneWinner))
	t.Run("TxReadsItsWrites", inParallel(b, testTxReadsItsWrites))
	t.Run("TxClockRuns", inParallel(b, testTxClockRuns))
}

// testTxClockRuns: in a caller's long transaction the store's clock is
// the time each step runs, not the transaction's start: a lease taken
// late in it is not short by the time already spent.
func testTxClockRuns(t *testing.T, b Backend) {
	needTx(t, b)
	s := b.Fresh(t)
	tx := b.Begin(t, s)
	defer tx.Rollback()
	first, err := tx.Steps.Reserve(ctx(t), Params(Long))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	second, err := tx.Steps.Reserve(ctx(t), Params(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if gap := second.Op.CreatedAt.Sub(first.Op.CreatedAt); gap < 250*time.Millisecond {
		t.Fatalf("two steps 300ms apart in one transaction are %v apart by the store's clock", gap)
	}
	if left := time.Until(second.Lease.Until); left < 50*time.Second {
		t.Fatalf("a one-minute lease taken late in a transaction has %v left", left)
	}
}

// testTxReadsItsWrites: the steps in a transaction read what it wrote,
// not what others see: a reservation or an enqueue repeated in it finds
// its own rows.
func testTxReadsItsWrites(t *testing.T, b Backend) {
	needTx(t, b)
	s := b.Fresh(t)
	tx := b.Begin(t, s)
	defer tx.Rollback()
	in := effectsOf(2, "crm")
	first := enqueue(t, tx.Steps, in)
	again, err := tx.Steps.Enqueue(ctx(t), in)
	if err != nil || again[0].ID != first[0].ID || again[1].ID != first[1].ID {
		t.Fatalf("enqueue repeated in one transaction: %v %v", again, err)
	}
	r, err := tx.Steps.Reserve(ctx(t), Params(Long))
	if err != nil || !r.Created {
		t.Fatalf("reserve: %+v %v", r, err)
	}
	p := Params(Long)
	p.Key = r.Op.Key
	r2, err := tx.Steps.Reserve(ctx(t), p)
	if err != nil || r2.Created || r2.Op.ID != r.Op.ID {
		t.Fatalf("reserve repeated in one transaction: %+v %v", r2, err)
	}
}

var answer = &ledger.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}},
	Body: []byte(`{"ticket":"T-1"}`)}

// inTx reserves, writes the business row and completes, all in tx.
func inTx(tb testing.TB, tx Tx) *ledger.Operation {
	tb.Helper()
	c := ctx(tb)
	r, err := tx.Steps.Reserve(c, Params(Long))
	if err != nil || !r.Created || !r.Owned() {
		tb.Fatalf("reserve in tx: %+v %v", r, err)
	}
	if err := tx.Write(r.Op.ID); err != nil {
		tb.Fatalf("business write: %v", err)
	}
	op, err := tx.Steps.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: answer})
	if err != nil || op.State != ledger.Succeeded {
		tb.Fatalf("complete in tx: %+v %v", op, err)
	}
	return r.Op
}

// testTxRollback: a reservation, a business write and a completion in a
// transaction that rolls back leave nothing: no operation, no row, no
// audit event. The key is free again.
func testTxRollback(t *testing.T, b Backend) {
	needTx(t, b)
	s := b.Fresh(t)
	tx := b.Begin(t, s)
	op := inTx(t, tx)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetByKey(ctx(t), clientKey(op.Tenant, op.Key))
	wantErr(t, "get after rollback", err, ledger.ErrNotFound)
	if n := b.Rows(t, s, op.ID); n != 0 {
		t.Fatalf("%d business rows after rollback", n)
	}
	events, err := s.AuditEvents(ctx(t), ledger.AuditParams{Tenant: op.Tenant, OperationID: op.ID})
	if err != nil || len(events) != 0 {
		t.Fatalf("audit events after rollback: %v %v", events, err)
	}
	again := reserve(t, s, ledger.ReserveParams{Tenant: op.Tenant, Namespace: op.Namespace, Key: op.Key, Kind: op.Kind, Route: op.Route,
		Fingerprint: op.Fingerprint, Lease: Long, Retention: Retention, Actor: "test"})
	if again.Op.ID == op.ID {
		t.Fatal("the rolled-back operation came back")
	}
}

// testTxCommit: committed, the operation is succeeded with its stored
// answer, the business row is there, and the audit log has both events.
func testTxCommit(t *testing.T, b Backend) {
	needTx(t, b)
	s := b.Fresh(t)
	tx := b.Begin(t, s)
	op := inTx(t, tx)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	got := get(t, s, op.ID)
	if got.State != ledger.Succeeded || got.Response == nil || !bytes.Equal(got.Response.Body, answer.Body) {
		t.Fatalf("after commit: %+v", got)
	}
	if n := b.Rows(t, s, op.ID); n != 1 {
		t.Fatalf("%d business rows after commit", n)
	}
	events, err := s.AuditEvents(ctx(t), ledger.AuditParams{Tenant: op.Tenant, OperationID: op.ID})
	if err != nil || len(events) != 2 || events[0].To != string(ledger.Executing) ||
		events[1].To != string(ledger.Succeeded) {
		t.Fatalf("audit events: %+v %v", events, err)
	}
}

// testTxCompleteJoins: an operation reserved by the store is completed in
// the business transaction: rolled back, it is still executing and its
// owner may complete it again; committed, it is done with its row.
func testTxCompleteJoins(t *testing.T, b Backend) {
	needTx(t, b)
	s := b.Fresh(t)
	r := reserve(t, s, Params(Long))
	for _, commit := range []bool{false, true} {
		tx := b.Begin(t, s)
		if err := tx.Write(r.Op.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Steps.Complete(ctx(t), *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: answer}); err != nil {
			t.Fatalf("complete in tx: %v", err)
		}
		end := map[bool]func() error{false: tx.Rollback, true: tx.Commit}[commit]
		if err := end(); err != nil {
			t.Fatal(err)
		}
		want := map[bool]ledger.State{false: ledger.Executing, true: ledger.Succeeded}[commit]
		if got := get(t, s, r.Op.ID); got.State != want || b.Rows(t, s, r.Op.ID) != map[bool]int{false: 0, true: 1}[commit] {
			t.Fatalf("commit=%t: %s with %d rows, want %s", commit, got.State, b.Rows(t, s, r.Op.ID), want)
		}
	}
}

// testTxFenced: an owner step in a transaction is fenced as any other: a
// lease that a later owner replaced completes nothing.
func testTxFenced(t *testing.T, b Backend) {
	needTx(t, b)
	s := b.Fresh(t)
	r := reserve(t, s, Params(Long))
	if _, err := s.Release(ctx(t), *r.Lease, ledger.Note{Reason: "not delivered"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx(t), ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "second"}); err != nil {
		t.Fatal(err)
	}
	tx := b.Begin(t, s)
	defer tx.Rollback()
	_, err := tx.Steps.Complete(ctx(t), *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: answer})
	wantErr(t, "stale owner's completion in tx", err, ledger.ErrStaleOwner)
}

// testTxOneWinner: a key reserved in an open transaction is the
// transaction's: the store's own reservation of it waits for the
// transaction, then finds the committed operation, never a second one.
func testTxOneWinner(t *testing.T, b Backend) {
	needTx(t, b)
	s := b.Fresh(t)
	tx := b.Begin(t, s)
	p := Params(Long)
	mine, err := tx.Steps.Reserve(ctx(t), p)
	if err != nil || !mine.Created {
		t.Fatalf("reserve in tx: %+v %v", mine, err)
	}
	done := make(chan ledger.Reservation, 1)
	errs := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := s.Reserve(c, p)
		done <- r
		errs <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the store's reservation start waiting
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := <-done, <-errs
	if err != nil || r.Created || r.Owned() || r.Op.ID != mine.Op.ID {
		t.Fatalf("the store's reservation of a key a transaction took: %+v %v", r, err)
	}
}
