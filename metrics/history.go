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
	Metric     string // what /metrics calls it
	Gauge      bool   // a level (read from the store), not a count per interval
}

// Indicators are the ten, in the article's order.
var Indicators = []Indicator{
	{"Operations created", "New keys reserved and run.", "idemgate_operations_created_total", false},
	{"Duplicates recognised", "Replays, and new keys with an existing business identity.",
		"idemgate_duplicates_recognised_total", false},
	{"Upstream calls avoided", "Keyed requests answered without calling the upstream.",
		"idemgate_upstream_calls_avoided_total", false},
	{"Fingerprint conflicts", "Keys reused with another request.", "idemgate_fingerprint_conflicts_total", false},
	{"Stuck executing", "Operations executing past their lease.", "idemgate_operations_stuck", true},
	{"Unknown operations", "Operations whose outcome nobody knows.", `idemgate_operations{state="unknown"}`, true},
	{"Time to reconcile", "The longest an operation resolved in the interval stayed unknown.",
		"idemgate_reconcile_duration_seconds", false},
	{"Retries", "Requests whose key had an operation already.", "idemgate_retries_total", false},
	{"Manual resolutions", "Unknown operations resolved by an operator.", "idemgate_manual_resolutions_total", false},
	{"Business duplicates found", "Operations an operator resolved as made twice, despite the checks.",
		"idemgate_business_duplicates_found_total", false},
}

// ReconcileIndicator is the position of the time to reconcile, whose
// values are seconds, not counts.
const ReconcileIndicator = iReconcile

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

// Sample is a tenant's indicators over one interval: counts for the
// counters, the level at its end for the gauges, the longest time to
// reconcile.
type Sample struct {
	At     time.Time
	Values [10]float64
}

// History keeps the last hour of each tenant's samples in memory: one
// instance's own view, which is all the dashboard needs (several instances
// each have theirs; Prometheus has the whole). Tenants are the
// configuration's, so their number is bounded.
type History struct {
	m    *Metrics
	size int

	mu      sync.Mutex
	tenants map[string]*tenantHistory
}

// tenantHistory is one tenant's counts this interval, and its ring.
type tenantHistory struct {
	counts  [10]atomic.Int64
	worst   atomic.Int64 // the longest time to reconcile this interval, in ms
	samples []Sample     // a ring, oldest first once full
	next    int
}

func newHistory(m *Metrics) *History {
	return &History{m: m, size: 360, tenants: map[string]*tenantHistory{}}
}

func (h *History) tenant(name string) *tenantHistory {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tenants[name]
	if t == nil {
		t = &tenantHistory{}
		h.tenants[name] = t
	}
	return t
}

func (h *History) add(tenant string, i int) { h.tenant(tenant).counts[i].Add(1) }

func (h *History) reconciled(tenant string, d time.Duration) {
	t := h.tenant(tenant)
	for ms := d.Milliseconds(); ; {
		old := t.worst.Load()
		if ms <= old || t.worst.CompareAndSwap(old, ms) {
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

// Sample closes an interval at now, for every tenant seen or in the store.
func (h *History) Sample(now time.Time) {
	gauges := map[string][2]float64{}
	stale := false
	if c := h.m.store; c != nil {
		st, _, ok := c.stats()
		stale = !ok
		for _, t := range st {
			gauges[t.Tenant] = [2]float64{float64(t.Stuck), float64(t.ByState[ledger.Unknown])}
			h.tenant(t.Tenant)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, t := range h.tenants {
		s := Sample{At: now}
		for i := range t.counts {
			s.Values[i] = float64(t.counts[i].Swap(0))
		}
		s.Values[iReconcile] = float64(t.worst.Swap(0)) / 1000
		s.Values[iStuck], s.Values[iUnknown] = gauges[name][0], gauges[name][1]
		if stale {
			s.Values[iStuck], s.Values[iUnknown] = math.NaN(), math.NaN()
		}
		if len(t.samples) < h.size {
			t.samples = append(t.samples, s)
			continue
		}
		t.samples[t.next] = s
		t.next = (t.next + 1) % h.size
	}
}

// Since returns a tenant's samples of the last d before now, oldest first.
func (h *History) Since(tenant string, d time.Duration, now time.Time) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.tenants[tenant]
	if t == nil {
		return nil
	}
	out := make([]Sample, 0, len(t.samples))
	for i := range t.samples {
		s := t.samples[(t.next+i)%len(t.samples)]
		if now.Sub(s.At) <= d {
			out = append(out, s)
		}
	}
	return out
}
