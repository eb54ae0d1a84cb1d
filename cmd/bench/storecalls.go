package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// The store calls -calls counts, each with the time spent in it.
const (
	callReserve = iota
	callComplete
	callGet
	callGetByKey
	callHistory
	callEffects
	callApproval
	nCalls
)

var callNames = [nCalls]string{"Reserve", "Complete", "Get", "GetByKey", "History", "Effects", "GetApproval"}

// callTally is how many times each call was made, and the time spent in
// it, summed over the callers.
type callTally struct {
	n, ns [nCalls]atomic.Int64
}

func (t *callTally) since(call int, t0 time.Time) {
	t.n[call].Add(1)
	t.ns[call].Add(int64(time.Since(t0)))
}

// take returns the counts and times so far and starts again from zero.
func (t *callTally) take() (n, ns [nCalls]int64) {
	for i := range nCalls {
		n[i], ns[i] = t.n[i].Swap(0), t.ns[i].Swap(0)
	}
	return n, ns
}

// countedStore times the calls a request makes on the ledger; the rest
// of the store, and the background work's calls, pass through.
type countedStore struct {
	ledger.Store
	tally *callTally
}

func (s countedStore) Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	defer s.tally.since(callReserve, time.Now())
	return s.Store.Reserve(ctx, p)
}

func (s countedStore) Complete(ctx context.Context, l ledger.Lease, o ledger.Outcome) (*ledger.Operation, error) {
	defer s.tally.since(callComplete, time.Now())
	return s.Store.Complete(ctx, l, o)
}

func (s countedStore) Get(ctx context.Context, id string) (*ledger.Operation, error) {
	defer s.tally.since(callGet, time.Now())
	return s.Store.Get(ctx, id)
}

func (s countedStore) GetByKey(ctx context.Context, k ledger.OpKey) (*ledger.Operation, error) {
	defer s.tally.since(callGetByKey, time.Now())
	return s.Store.GetByKey(ctx, k)
}

func (s countedStore) History(ctx context.Context, id string) ([]ledger.Event, error) {
	defer s.tally.since(callHistory, time.Now())
	return s.Store.History(ctx, id)
}

func (s countedStore) Effects(ctx context.Context, k ledger.OpKey) ([]*ledger.Effect, error) {
	defer s.tally.since(callEffects, time.Now())
	return s.Store.Effects(ctx, k)
}

func (s countedStore) GetApproval(ctx context.Context, id string) (*ledger.Approval, error) {
	defer s.tally.since(callApproval, time.Now())
	return s.Store.GetApproval(ctx, id)
}

// callRow is a row's store calls over all its rounds.
type callRow struct {
	requests int
	n, ns    [nCalls]int64
}

func (c *callRow) add(requests int, n, ns [nCalls]int64) {
	c.requests += requests
	for i := range nCalls {
		c.n[i] += n[i]
		c.ns[i] += ns[i]
	}
}

// printCalls prints, for each counted row, the store calls a request
// made and the mean time each took.
func printCalls(w io.Writer, env *benchEnv, calls map[row]*callRow, concurrencies []int) {
	fmt.Fprintln(w, "\nstore calls per request (made by the request; mean ms each):")
	for _, t := range env.targets {
		for _, mode := range []string{"new-key", action} {
			for _, c := range concurrencies {
				cr := calls[row{t.name, mode, c}]
				if cr == nil || cr.requests == 0 {
					continue
				}
				fmt.Fprintf(w, "  %-24s %-7s c=%-3d", t.name, mode, c)
				var total float64
				for i := range nCalls {
					if cr.n[i] == 0 {
						continue
					}
					mean := float64(cr.ns[i]) / float64(cr.n[i]) / 1e6
					per := float64(cr.n[i]) / float64(cr.requests)
					total += mean * per
					fmt.Fprintf(w, " %s %.2f×%.3f", callNames[i], per, mean)
				}
				fmt.Fprintf(w, "  = %.3f ms\n", total)
			}
		}
	}
}

// counted runs measure, adding the store calls its requests made to
// key's row when the target's calls are counted.
func (e *benchEnv) counted(key row, measure func() (round, error)) (round, error) {
	tally := e.tallies[key.target]
	if tally == nil {
		return measure()
	}
	tally.take() // the background's calls since the last row
	rd, err := measure()
	n, ns := tally.take()
	if e.calls[key] == nil {
		e.calls[key] = &callRow{}
	}
	e.calls[key].add(len(rd.lat), n, ns)
	return rd, err
}
