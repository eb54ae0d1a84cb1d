package metrics

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// Indicator is one of the workflow article's ten indicators, as the
// dashboard charts it.
type Indicator struct {
	Name, Help string
	Gauge      bool // a level (read from the store), not a count per interval
}

// Indicators are the ten, in the article's order.
var Indicators = []Indicator{
	{Name: "operations created", Help: "new keys reserved and run"},
	{Name: "duplicates recognised", Help: "replays, and new keys with an existing business identity"},
	{Name: "upstream calls avoided", Help: "keyed requests answered without calling the upstream"},
	{Name: "fingerprint conflicts", Help: "keys reused with another request"},
	{Name: "stuck executing", Help: "operations executing past their lease", Gauge: true},
	{Name: "unknown", Help: "operations whose outcome nobody knows", Gauge: true},
	{Name: "time to reconcile", Help: "seconds an operation resolved in the interval stayed unknown (the longest)"},
	{Name: "retries", Help: "requests whose key had an operation already"},
	{Name: "manual resolutions", Help: "unknown operations resolved by an operator"},
	{Name: "business duplicates found", Help: "operations an operator resolved as a duplicate, despite the checks"},
}

// The indicators' positions.
const (
	iCreated = iota
	iDuplicates
	iAvoided
	iConflicts
	iStuck
	iUnknown
	iReconcile
	iRetries
	iResolutions
	iFound
)

// Sample is the indicators over one interval: counts for the counters,
// the level at its end for the gauges, the longest time to reconcile.
type Sample struct {
	At     time.Time
	Values [10]float64
}

// History keeps the last hour of samples in memory: one instance's own
// view, which is all the dashboard needs (several instances each have
// theirs; Prometheus has the whole).
type History struct {
	m      *Metrics
	counts [10]atomic.Int64
	worst  atomic.Int64 // the longest time to reconcile this interval, in ms

	mu      sync.Mutex
	samples []Sample // a ring, oldest first once full
	next    int
	size    int
}

func newHistory(m *Metrics) *History { return &History{m: m, size: 360} }

func (h *History) add(i int) { h.counts[i].Add(1) }

func (h *History) reconciled(d time.Duration) {
	for ms := d.Milliseconds(); ; {
		old := h.worst.Load()
		if ms <= old || h.worst.CompareAndSwap(old, ms) {
			return
		}
	}
}

// Run samples every interval (10 s when 0) until ctx ends.
func (h *History) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = 10 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.Sample(now)
		}
	}
}

// Sample closes an interval at now.
func (h *History) Sample(now time.Time) {
	s := Sample{At: now}
	for i := range h.counts {
		s.Values[i] = float64(h.counts[i].Swap(0))
	}
	s.Values[iReconcile] = float64(h.worst.Swap(0)) / 1000
	if c := h.m.store; c != nil {
		if st, _, ok := c.stats(); ok {
			for _, t := range st {
				s.Values[iStuck] += float64(t.Stuck)
				s.Values[iUnknown] += float64(t.ByState[ledger.Unknown])
			}
		} else {
			s.Values[iStuck], s.Values[iUnknown] = math.NaN(), math.NaN()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) < h.size {
		h.samples = append(h.samples, s)
		return
	}
	h.samples[h.next] = s
	h.next = (h.next + 1) % h.size
}

// Since returns the samples of the last d, oldest first.
func (h *History) Since(d time.Duration, now time.Time) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Sample, 0, len(h.samples))
	for i := range h.samples {
		s := h.samples[(h.next+i)%len(h.samples)]
		if now.Sub(s.At) <= d {
			out = append(out, s)
		}
	}
	return out
}
