package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemgate/idemgate/ledger"
)

// maxBatch bounds the step statements that share one transaction.
const maxBatch = 64

// write is one step's statement waiting for, or running in, a batch.
type write struct {
	ctx   context.Context
	query string
	args  []any // the first is the operation's id for a step that merges
	merge merge
	owner bool // an owner step: with durability=relaxed it may skip the disk
	scan  func(pgx.Row) error
	err   error
	done  chan struct{}
}

// batcher is the client side of group commit. Step statements that arrive
// while the connections it may use are busy queue up, and the next free
// connection runs all of them as one transaction in one round trip: one
// BEGIN, the statements, one COMMIT, pipelined. A statement's result is
// released only once its transaction has committed. On this server the
// per-transaction work (a transaction id, a commit record, a WAL flush to
// wait for) is shared by the batch, which is what lets a ledger that writes
// more per step than a hand-written floor still outrun it under load.
type batcher struct {
	s       *Store
	jobs    chan *write
	slots   chan struct{} // one per batch in flight
	stop    chan struct{}
	stopped chan struct{} // closed once close has drained the queue
	once    sync.Once
	alone   sync.WaitGroup // steps of failed batches, running on their own
}

func newBatcher(s *Store, inFlight int) *batcher {
	b := &batcher{s: s, jobs: make(chan *write, maxBatch), slots: make(chan struct{}, inFlight),
		stop: make(chan struct{}), stopped: make(chan struct{})}
	go b.loop()
	return b
}

// errClosed is what a step gets once the store is closed.
var errClosed = fmt.Errorf("store closed: %w", ledger.ErrUnavailable)

// run queues a statement and waits for its batch; m says whether, and
// how, it may merge with others of its kind (see multi.go).
func (b *batcher) run(ctx context.Context, m merge, owner bool, scan func(pgx.Row) error, query string, args ...any) error {
	w := &write{ctx: ctx, query: query, args: args, merge: m, owner: owner, scan: scan, done: make(chan struct{})}
	select {
	case <-b.stop:
		return errClosed
	default:
	}
	select {
	case b.jobs <- w:
	case <-b.stop:
		return errClosed
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for a batch: %w", ledger.ErrUnavailable, ctx.Err())
	}
	// Once queued, a statement runs to its end (the server would go on
	// with it anyway): waiting for it keeps its result this caller's,
	// within the caller's bound. Past it, the caller hears that the store
	// did not answer in time; whether the statement committed is unknown
	// to it, as for a lost connection (an owner's or a reservation's
	// repeat recognises its own commit; an orphaned reservation becomes
	// unknown when its lease lapses, never a second effect).
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w: no answer from the store within the request's bound: %w",
			ledger.ErrUnavailable, ledger.ErrReplyLost, ctx.Err())
	case <-b.stopped:
		select { // it may have run before the batcher stopped
		case <-w.done:
			return w.err
		default:
			return errClosed
		}
	}
}

func (b *batcher) loop() {
	for {
		select {
		case b.slots <- struct{}{}:
		case <-b.stop:
			return
		}
		var batch []*write
		select {
		case w := <-b.jobs:
			batch = b.gather(w)
		case <-b.stop:
			<-b.slots
			return
		}
		if cap(b.slots) == 1 {
			// One batch in flight: the loop runs it itself. Handing it to a
			// new goroutine costs a wake-up on the path between two
			// batches, while the server waits for the next, and on a busy
			// machine a wake-up waits behind every runnable goroutine.
			b.s.runBatch(batch, &b.alone)
			<-b.slots
			continue
		}
		go func() {
			defer func() { <-b.slots }()
			b.s.runBatch(batch, &b.alone)
		}()
	}
}

// gather takes what is queued behind first, up to maxBatch.
func (b *batcher) gather(first *write) []*write {
	batch := []*write{first}
	for len(batch) < maxBatch {
		select {
		case w := <-b.jobs:
			batch = append(batch, w)
		default:
			return batch
		}
	}
	return batch
}

// close stops taking batches; those in flight finish, and what is queued
// fails.
func (b *batcher) close() {
	b.once.Do(func() {
		close(b.stop)
		for i := 0; i < cap(b.slots); i++ {
			b.slots <- struct{}{}
		}
		b.alone.Wait()
		for {
			select {
			case w := <-b.jobs:
				w.err = errClosed
				close(w.done)
			default:
				close(b.stopped)
				return
			}
		}
	})
}

// runBatch runs a batch as one transaction. A statement that fails aborts
// it all (the server's rule), and so does one that waits on a row lock
// longer than lockWait: then each statement runs again alone, outside the
// batches, so that one bad or blocked step never holds up the others. A
// batch whose connection is lost, or whose commit fails, fails as a whole:
// whether it committed is unknown, as for any lost statement.
func (s *Store) runBatch(batch []*write, alone *sync.WaitGroup) {
	began := time.Now()
	err := s.sendBatch(batch)
	var failed *stepFailed
	switch {
	case err == nil:
		s.commits.Committed(len(batch), time.Since(began))
	case errors.As(err, &failed):
		for _, w := range batch {
			alone.Add(1)
			go func() {
				defer alone.Done()
				s.runAlone(w)
				close(w.done)
			}()
		}
		return
	default:
		for _, w := range batch {
			w.err = err
		}
	}
	for _, w := range batch {
		close(w.done)
	}
}

// stepFailed is a statement of a batch that failed on its own.
type stepFailed struct{ err error }

func (e *stepFailed) Error() string { return e.err.Error() }

// runAlone runs one statement by itself.
func (s *Store) runAlone(w *write) {
	query := w.query
	if lazy, ok := lazySQL[query]; ok && w.owner && s.relaxed {
		query = lazy
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), s.batchTimeout)
	defer cancel()
	began := time.Now()
	if w.err = w.scan(s.pool.QueryRow(ctx, query, w.args...)); ctx.Err() != nil && w.err != nil {
		w.err = silent(w.err, s.batchTimeout)
	}
	if w.err == nil {
		s.commits.Committed(1, time.Since(began))
	}
}

// silent is the error of a statement or a batch that the server did not
// answer within timeout, its own bound (no caller's): the store is
// unavailable, and whether the work committed is unknown. Mapped as the
// caller's context error, it was a 500 internal error after 30 s.
func silent(err error, timeout time.Duration) error {
	// The cause in words only: a statement's failure in the chain would
	// send the batch's steps to run alone, each to wait as long again.
	return fmt.Errorf("batch: %w: %w: the server did not answer within %v: %v", ledger.ErrUnavailable,
		ledger.ErrReplyLost, timeout, err)
}

// lockWait is how long a statement of a batch may wait for a row lock.
const lockWait = "50ms"

// batchTimeout bounds a batch: its callers cannot leave it (the server
// would go on without them), so a server that stops answering must not
// hold them for ever.
const batchTimeout = 30 * time.Second

// sendBatch pipelines BEGIN, the settings, the statements and COMMIT on
// one connection. A step alone needs no BEGIN and no COMMIT: its pipeline
// is one implicit transaction, which commits at its end (one statement
// less to start, and one less to finish, per step at low load).
func (s *Store) sendBatch(batch []*write) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.batchTimeout)
	defer cancel()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = silent(err, s.batchTimeout)
		}
	}()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return mapErr("batch", err)
	}
	defer conn.Release()
	wrapped := len(batch) > 1
	b := &pgx.Batch{}
	if wrapped {
		b.Queue("BEGIN")
	}
	// A statement that waits on a row lock (an operation in another
	// session's open transaction) would hold up every step behind it: past
	// lockWait the batch is given up and its steps run alone. A local
	// setting holds for the transaction, explicit or implicit.
	b.Queue("SELECT set_config('lock_timeout', $1, true)", s.lockWait)
	if s.relaxed && allOwners(batch) {
		b.Queue("SELECT set_config('synchronous_commit', 'off', true)")
	}
	sts := statements(batch)
	if merged(sts) {
		// A merged statement joins its arrays to the operations. Planned
		// once while the table was small, its cached plan would scan the
		// whole table for ever after; planned without sequential scans, it
		// looks each operation up by its key, at any size.
		b.Queue("SELECT set_config('enable_seqscan', 'off', true)")
	}
	preamble := len(b.QueuedQueries)
	for _, st := range sts {
		query, args := st.query()
		b.Queue(query, args...)
	}
	if wrapped {
		b.Queue("COMMIT")
	}
	br := conn.SendBatch(ctx, b)
	err = readBatch(br, sts, preamble, wrapped, conn.Conn().TypeMap())
	if cerr := br.Close(); err == nil && cerr != nil {
		err = mapErr("batch", cerr)
	}
	return err
}

// readBatch reads the results in order: the preamble, each statement, and
// the commit when there is one, whose tag must say COMMIT (an aborted
// transaction answers COMMIT with ROLLBACK, and no error). An implicit
// transaction's commit, or its failure, comes with the end of the
// pipeline (br.Close).
func readBatch(br pgx.BatchResults, sts []statement, preamble int, wrapped bool, types *pgtype.Map) error {
	for range preamble {
		if _, err := br.Exec(); err != nil {
			return mapErr("batch", err)
		}
	}
	for _, st := range sts {
		var err error
		if st.kind == single {
			w := st.writes[0]
			if w.err = w.scan(br.QueryRow()); w.err != nil && !errors.Is(w.err, pgx.ErrNoRows) {
				err = w.err
			}
		} else {
			rows, qerr := br.Query()
			if err = qerr; err == nil {
				err = readMerged(st, rows, types)
			}
		}
		if err == nil {
			continue
		}
		if err := mapErr("batch", err); errors.Is(err, ledger.ErrUnavailable) {
			return err
		}
		return &stepFailed{err}
	}
	if !wrapped {
		return nil
	}
	tag, err := br.Exec()
	if err != nil {
		return mapErr("commit", err)
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("commit: %w: the server answered %s", ledger.ErrUnavailable, tag)
	}
	return nil
}

func allOwners(batch []*write) bool {
	for _, w := range batch {
		if !w.owner {
			return false
		}
	}
	return true
}
