package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// Run delivers until ctx ends; deliveries in flight then finish (each is
// bounded by its target's timeout) and are recorded as each ends. It
// keeps up to Concurrency deliveries going, in turns: a turn records the
// outcomes of the deliveries that ended since the last one and claims
// what is due for the places they freed, never more, so a claimed
// delivery always starts at once; it is one transaction, so one commit
// (ledger.Store's SettleEffects). Deliveries that end while a turn is at
// the store wait for the next one, and share it, as steps share a group
// commit; so do OnDelivery's calls, made on Run's goroutine. A turn sees
// its own results, so an operation's next effect goes out in the turn
// that recorded its predecessor. When nothing is due it waits Every.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.compile(); err != nil {
		return err
	}
	l := &runLoop{r: r, ended: make(chan delivered, r.concurrency())}
	l.run(ctx)
	l.stop(ctx)
	return nil
}

// runLoop is Run's state, owned by its goroutine.
type runLoop struct {
	r          *Relay
	ended      chan delivered
	deliveries sync.WaitGroup
	// pending have ended and wait for a turn; inFlight counts the
	// deliveries running.
	pending            []delivered
	inFlight, failures int
}

func (l *runLoop) run(ctx context.Context) {
	for ctx.Err() == nil {
		if free := l.r.concurrency() - l.inFlight; free > 0 || len(l.pending) > 0 {
			if l.turn(ctx, free) {
				continue // more may be due at once
			}
		}
		select {
		case <-ctx.Done():
		case d := <-l.ended:
			l.collect(d)
		case <-time.After(l.r.wait(l.failures)):
		}
	}
}

// turn makes one turn and starts what it claimed. It reports whether the
// turn filled every place it asked for. A turn that failed keeps its
// results for the next, while their leases last.
func (l *runLoop) turn(ctx context.Context, free int) bool {
	claims, recorded, err := l.r.turn(ctx, l.pending, free)
	switch {
	case err == nil:
		l.failures = 0
		l.r.reportTurn(l.pending, recorded, nil)
		l.pending = nil
	case ctx.Err() == nil:
		l.failures++
		l.r.log().Error("relay turn failed", "err", err, "retry_in", l.r.wait(l.failures))
		l.pending = l.unexpired(l.pending, err)
	}
	if ctx.Err() != nil {
		// Claimed as the relay stops: not sent; recorded not applied,
		// due again at once, by the last turns.
		for _, c := range claims {
			l.pending = append(l.pending, delivered{claimed: c, start: l.r.now(),
				outcome: ledger.EffectOutcome{State: ledger.Prepared, ErrorCode: "relay_stopping"}})
		}
		return false
	}
	for _, c := range claims {
		l.inFlight++
		l.deliveries.Add(1)
		go func() {
			defer l.deliveries.Done()
			l.ended <- l.r.deliver(context.WithoutCancel(ctx), c)
		}()
	}
	return err == nil && free > 0 && len(claims) == free
}

// unexpired keeps the results of a failed turn that may still be
// recorded, and reports the others, whose leases have passed by this
// clock: their effects will be sent again, at least once.
func (l *runLoop) unexpired(ds []delivered, err error) []delivered {
	keep := ds[:0]
	for _, d := range ds {
		if l.r.now().Before(d.deadline.Add(margin(l.r.lease()))) {
			keep = append(keep, d)
		} else {
			l.r.report(d, err)
		}
	}
	return keep
}

// collect takes d and the other deliveries that ended meanwhile.
func (l *runLoop) collect(d delivered) {
	n := len(l.pending)
	l.pending = drain(l.ended, append(l.pending, d))
	l.inFlight -= len(l.pending) - n
}

// stop records what is pending, then the result of each delivery still
// in flight as it ends: a result waits for its turn, never for a slower
// delivery. A stopping relay claims nothing, and does not retry: a
// result not recorded is reported, and its effect goes again once its
// lease lapses.
func (l *runLoop) stop(ctx context.Context) {
	for l.inFlight > 0 || len(l.pending) > 0 {
		if len(l.pending) > 0 {
			_, recorded, err := l.r.turn(ctx, l.pending, 0)
			l.r.reportTurn(l.pending, recorded, err)
			l.pending = nil
		}
		if l.inFlight > 0 {
			l.collect(<-l.ended)
		}
	}
	l.deliveries.Wait()
}

// drain appends what else is waiting on c to ds: the deliveries that
// ended meanwhile share one turn.
func drain(c chan delivered, ds []delivered) []delivered {
	for {
		select {
		case d := <-c:
			ds = append(ds, d)
		default:
			return ds
		}
	}
}
