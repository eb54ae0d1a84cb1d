package keyed

import (
	"context"
	"sync"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// wait waits for an executing operation to leave executing, bounded by
// e's wait, its context, and the lease: once the lease has lapsed
// (heartbeats extend it while the owner works), the operation will not
// end well, and the answer is the state it is in.
func (x *Executor) wait(e *exec, op *ledger.Operation) *ledger.Operation {
	ctx, cancel := context.WithTimeout(e.ctx, min(e.Wait, x.opts.MaxWait))
	defer cancel()
	done := x.waiters.wait(op.ID)
	defer x.waiters.forget(op.ID, done)
	poll := 10 * time.Millisecond
	for op.State == ledger.Executing && time.Now().Before(op.LeaseUntil.Add(leaseGrace)) {
		select {
		case <-ctx.Done():
			return op
		case <-done: // finished in this process
		case <-time.After(poll): // or in another one
			poll = min(poll*2, 250*time.Millisecond)
		}
		latest, err := x.opts.Store.Get(context.WithoutCancel(ctx), op.ID)
		if err != nil {
			return op
		}
		op = latest
	}
	return op
}

// leaseGrace allows for clock skew between this process and the store
// before a lease counts as lapsed for a waiter.
const leaseGrace = 500 * time.Millisecond

// waiters lets commands waiting for an operation hear at once that this
// process finished it; other processes' completions are found by polling.
type waiters struct {
	mu sync.Mutex
	m  map[string]*waiter
}

type waiter struct {
	ch    chan struct{}
	count int
}

func newWaiters() *waiters { return &waiters{m: map[string]*waiter{}} }

func (w *waiters) wait(id string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := w.m[id]
	if wt == nil {
		wt = &waiter{ch: make(chan struct{})}
		w.m[id] = wt
	}
	wt.count++
	return wt.ch
}

func (w *waiters) forget(id string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt := w.m[id]; wt != nil && wt.ch == ch {
		if wt.count--; wt.count == 0 {
			delete(w.m, id)
		}
	}
}

func (w *waiters) signal(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt := w.m[id]; wt != nil {
		close(wt.ch)
		delete(w.m, id)
	}
}
