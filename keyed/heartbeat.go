package keyed

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// heartbeater extends the lease every third of it while the effect runs:
// a heartbeat held up by a busy store still has a second chance before the
// lease lapses (a lapsed lease is never extended, and makes the operation
// unknown).
type heartbeater struct {
	mu      sync.Mutex
	lease   ledger.Lease
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
	// away is set once a heartbeat found the store unavailable: a lease
	// that lapses then lapsed because the store was away, and its owner
	// may still settle the operation (ledger.Outcome.AfterLapse).
	away atomic.Bool
}

func (x *Executor) heartbeat(ctx context.Context, l ledger.Lease, d time.Duration) *heartbeater {
	hb := &heartbeater{lease: l, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(hb.stopped)
		t := time.NewTicker(d / 3)
		defer t.Stop()
		for {
			select {
			case <-hb.done:
				return
			case <-t.C:
			}
			hb.mu.Lock()
			next, err := x.opts.Store.Heartbeat(context.WithoutCancel(ctx), hb.lease, d)
			if err == nil {
				hb.lease = next
			}
			hb.mu.Unlock()
			if errors.Is(err, ledger.ErrUnavailable) {
				hb.away.Store(true)
			}
			if errors.Is(err, ledger.ErrStaleOwner) {
				x.log(ctx, "lease lost", l.OpID, err)
				return
			} else if err != nil {
				x.log(ctx, "heartbeat", l.OpID, err)
			}
		}
	}()
	return hb
}

// current returns the latest lease.
func (hb *heartbeater) current() ledger.Lease {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.lease
}

// stop ends the heartbeats and returns the latest lease.
func (hb *heartbeater) stop() ledger.Lease {
	hb.once.Do(func() { close(hb.done) })
	<-hb.stopped
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.lease
}
