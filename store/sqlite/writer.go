package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

// maxBatch bounds the steps that share one commit: enough to absorb any
// burst a gateway sees, few enough that one batch never holds the write
// lock long.
const maxBatch = 256

// kind says what a step needs of its batch (see steps.Kind): durable
// steps wait for the disk; reserving ones may create an operation, and are
// refused new keys below the free-space floor; owning ones (an owner's
// completion, release, move to unknown, heartbeat) let a batch made only
// of them commit without waiting for the disk under durability=relaxed.
type kind = steps.Kind

const (
	durable   = steps.Durable
	reserving = steps.Reserving
	owning    = steps.Owning
)

// job is one store step waiting for, or running in, a batch.
type job struct {
	ctx  context.Context
	kind kind
	fn   func(ctx context.Context, b *batchTx) error
	err  error
	// aborted is set when the batch failed as a whole: whatever fn
	// computed was rolled back, and err says why.
	aborted bool
	skipped bool // its caller had gone before it ran
	done    chan struct{}
}

// batchTx is what a job's statements run on: the writer's connection,
// inside the batch's transaction, so a step sees the writes of the steps
// before it in the same batch.
type batchTx struct {
	conn *writeConn
	// low is set when the disk is below the free-space floor: no new
	// operation may be created in this batch.
	low bool
}

// writer is the group committer. One goroutine owns the single write
// connection; steps queue for it, and each round takes everything queued
// into one IMMEDIATE transaction and one commit, so concurrent
// reservations and completions pay for one disk wait between them. No
// step's result is released before its batch has committed.
type writer struct {
	s       *Store
	conn    *writeConn
	jobs    chan *job
	closing chan struct{}
	stopped chan struct{}
	once    sync.Once
	relaxed bool   // durability=relaxed
	sync    string // the synchronous mode the connection is in now
	// pending counts the steps queued or running, for the tests that prove
	// batching.
	pending atomic.Int64
}

func newWriter(s *Store, conn *sql.Conn, relaxed bool) *writer {
	w := &writer{s: s, conn: newWriteConn(conn), jobs: make(chan *job, maxBatch), closing: make(chan struct{}),
		stopped: make(chan struct{}), relaxed: relaxed, sync: s.sync}
	go w.loop()
	return w
}

// errClosed is what a step gets once the store is closed.
var errClosed = fmt.Errorf("store closed: %w", ledger.ErrUnavailable)

// submit queues fn and waits for its batch to commit. It reports whether
// what fn computed is void: its batch failed, or the caller's ctx ended
// first. In that last case the step may still commit (as a reply lost on a
// network would); owner steps are built to be retried.
func (w *writer) submit(ctx context.Context, k kind, fn func(context.Context, *batchTx) error) (void bool, err error) {
	j := &job{ctx: ctx, kind: k, fn: fn, done: make(chan struct{})}
	w.pending.Add(1)
	defer w.pending.Add(-1)
	select {
	case <-w.closing:
		return true, errClosed
	default:
	}
	select {
	case w.jobs <- j:
	case <-w.closing:
		return true, errClosed
	case <-ctx.Done():
		return true, gaveUp(ctx)
	}
	select {
	case <-j.done:
		return j.aborted || j.skipped, j.err
	case <-w.stopped:
		select { // it may have run just before the writer stopped
		case <-j.done:
			return j.aborted || j.skipped, j.err
		default:
			return true, errClosed
		}
	case <-ctx.Done():
		return true, gaveUp(ctx)
	}
}

// gaveUp is the error of a caller that stopped waiting for the writer:
// the store did not answer in time, which is unavailability; a step
// already queued may still be made.
func gaveUp(ctx context.Context) error {
	return fmt.Errorf("%w: %w: waiting for the writer: %w", ledger.ErrUnavailable, ledger.ErrReplyLost, ctx.Err())
}

func (w *writer) loop() {
	defer close(w.stopped)
	for {
		var first *job
		select {
		case first = <-w.jobs:
		case <-w.closing:
			w.drainClosed()
			return
		}
		batch := w.gather(first)
		began := time.Now()
		if w.run(batch) {
			w.s.commits.Committed(ran(batch), time.Since(began))
		}
		for _, j := range batch {
			close(j.done)
		}
	}
}

// gather takes what is queued behind first, up to maxBatch: the steps that
// arrived while the last batch waited for the disk share the next commit.
func (w *writer) gather(first *job) []*job {
	batch := []*job{first}
	for len(batch) < maxBatch {
		select {
		case j := <-w.jobs:
			batch = append(batch, j)
		default:
			return batch
		}
	}
	return batch
}

// drainClosed fails what is still queued at close.
func (w *writer) drainClosed() {
	for {
		select {
		case j := <-w.jobs:
			j.err, j.aborted = errClosed, true
			close(j.done)
		default:
			return
		}
	}
}

// run executes one batch, and reports whether it committed: a check that
// the file is still the store's, the free-space floor, BEGIN IMMEDIATE,
// each step, COMMIT. A step's own refusal (a guard, a fingerprint
// mismatch) leaves the others alone; a driver error ends the batch, and
// every step in it fails with it, since any of them may have read what it
// wrote.
func (w *writer) run(batch []*job) bool {
	if err := w.s.checkFile(); err != nil {
		abort(batch, err)
		return false
	}
	b := &batchTx{conn: w.conn, low: w.s.belowFloor()}
	if err := w.begin(batch); err != nil {
		abort(batch, mapErr("begin", err))
		return false
	}
	for _, j := range batch {
		if j.ctx.Err() != nil {
			j.err, j.skipped = gaveUp(j.ctx), true // its caller has gone: it never runs
			continue
		}
		// The statements run without the caller's cancellation: an
		// interrupted write inside a transaction rolls back all of it.
		j.err = j.fn(context.WithoutCancel(j.ctx), b)
		if j.err != nil && !refusal(j.err) {
			err := j.err
			w.rollback()
			abort(batch, err)
			return false
		}
	}
	if _, err := w.conn.ExecContext(context.Background(), "COMMIT"); err != nil {
		w.rollback()
		abort(batch, mapErr("commit", err))
		return false
	}
	return true
}

// ran counts the steps of a batch that ran: not those whose caller had
// gone.
func ran(batch []*job) int {
	n := 0
	for _, j := range batch {
		if !j.skipped {
			n++
		}
	}
	return n
}

// begin sets the batch's synchronous mode and opens its transaction.
func (w *writer) begin(batch []*job) error {
	mode := w.s.sync
	if w.relaxed && allOwning(batch) && !weak(mode) {
		mode = "NORMAL"
	}
	if mode != w.sync {
		if _, err := w.conn.conn.ExecContext(context.Background(), "PRAGMA synchronous = "+mode); err != nil {
			return err
		}
		w.sync = mode
	}
	_, err := w.conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
	return err
}

func allOwning(batch []*job) bool {
	for _, j := range batch {
		if j.kind != owning {
			return false
		}
	}
	return true
}

// rollback ends a failed transaction. SQLite may have rolled it back
// already (after SQLITE_FULL or an I/O error): then there is nothing to do.
func (w *writer) rollback() {
	_, _ = w.conn.ExecContext(context.Background(), "ROLLBACK")
}

// abort fails every step of a batch with err.
func abort(batch []*job, err error) {
	for _, j := range batch {
		if !j.skipped {
			j.err, j.aborted = err, true
		}
	}
}

// refusal reports whether err is a step's own answer, which leaves the
// transaction as it was: a guard that did not match, a value the
// database refused (its statement alone is rolled back), or a new
// operation refused below the free-space floor before it was written.
func refusal(err error) bool {
	if errors.Is(err, errBelowFloor) {
		return true
	}
	for _, e := range []error{ledger.ErrNotFound, ledger.ErrStaleOwner, ledger.ErrIllegalTransition,
		ledger.ErrFingerprintMismatch, ledger.ErrInvalid, ledger.ErrConcurrencyLocked, ledger.ErrApprovalRequired,
		ledger.ErrApprovalMismatch, ledger.ErrApprovalClosed, ledger.ErrForbidden} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// close stops the loop once the batch in progress is done.
func (w *writer) close() error {
	w.once.Do(func() { close(w.closing) })
	<-w.stopped
	return errors.Join(w.conn.close(), w.conn.conn.Close())
}

// step runs fn as one job and returns its result, or the zero value if its
// batch failed.
func step[T any](s *Store, ctx context.Context, k kind, fn func(context.Context, driver) (T, error)) (T, error) {
	var out T
	void, err := s.w.submit(ctx, k, func(ctx context.Context, b *batchTx) error {
		var err error
		out, err = fn(ctx, driver{s: s, q: b.conn, low: b.low})
		return err
	})
	if void {
		var zero T
		return zero, err
	}
	return out, err
}
