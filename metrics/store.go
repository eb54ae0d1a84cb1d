package metrics

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/ledger"
)

// Store is what the metrics read: a store's stats. A ledger.Store is
// one.
type Store interface {
	Stats(ctx context.Context) ([]ledger.TenantStats, error)
}

var _ Store = ledger.Store(nil)

// storeCollector reads the gauges from the store at scrape time: what the
// store holds, not what this instance saw, so instances sharing a store
// agree. Reads are shared for ttl, and bounded in time.
type storeCollector struct {
	store   Store
	ttl     time.Duration
	errors  prometheus.Counter
	tenants []string // shown at zero until the store holds something of theirs

	mu   sync.Mutex
	at   time.Time
	last []ledger.TenantStats
	took time.Duration

	operations, oldest, stuck, pending, oldestApproval, checkpointAge, readTime *prometheus.Desc
}

func gauge(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("idemgate_"+name, help, labels, nil)
}

func newStoreCollector(s Store, ttl time.Duration, errors prometheus.Counter, tenants []string) *storeCollector {
	if ttl <= 0 {
		ttl = time.Second
	}
	return &storeCollector{store: s, ttl: ttl, errors: errors, tenants: tenants,
		operations: gauge("operations", "Operations in the store, by tenant and state (unknown: indicator 6).",
			"tenant", "state"),
		oldest: gauge("oldest_operation_age_seconds", "How long the oldest executing, and the oldest unknown, "+
			"operation has been in its state.", "tenant", "state"),
		stuck: gauge("operations_stuck", "Operations executing past their lease: their owner is gone and the "+
			"sweep has not made them unknown yet (indicator 5).", "tenant"),
		pending: gauge("approvals_pending", "Approvals waiting for a human.", "tenant"),
		oldestApproval: gauge("oldest_pending_approval_age_seconds", "How long the oldest pending approval "+
			"has waited.", "tenant"),
		checkpointAge: gauge("audit_checkpoint_age_seconds", "Time since the tenant's latest signed audit "+
			"checkpoint.", "tenant"),
		readTime: gauge("store_stats_read_seconds", "How long the latest read of the store's gauges took."),
	}
}

// Describe implements prometheus.Collector.
func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.operations, c.oldest, c.stuck, c.pending, c.oldestApproval,
		c.checkpointAge, c.readTime} {
		ch <- d
	}
}

// stats returns the store's stats, read at most once per ttl.
func (c *storeCollector) stats() ([]ledger.TenantStats, time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < c.ttl && c.last != nil {
		return c.last, c.took, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	st, err := c.store.Stats(ctx)
	if err != nil {
		c.errors.Inc()
		return nil, 0, false
	}
	c.at, c.last, c.took = time.Now(), st, time.Since(began)
	return st, c.took, true
}

// Collect implements prometheus.Collector.
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st, took, ok := c.stats()
	if !ok {
		return // the scrape shows the error counter, and no stale gauge
	}
	now := time.Now()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	g(c.readTime, took.Seconds())
	for _, t := range c.withConfigured(st) {
		for _, s := range ledger.States {
			g(c.operations, float64(t.ByState[s]), t.Tenant, string(s))
		}
		for s, at := range map[ledger.State]time.Time{ledger.Executing: t.OldestExecuting, ledger.Unknown: t.OldestUnknown} {
			g(c.oldest, age(now, at), t.Tenant, string(s))
		}
		g(c.stuck, float64(t.Stuck), t.Tenant)
		g(c.pending, float64(t.ApprovalsPending), t.Tenant)
		g(c.oldestApproval, age(now, t.OldestApproval), t.Tenant)
		if !t.LastCheckpoint.IsZero() {
			g(c.checkpointAge, age(now, t.LastCheckpoint), t.Tenant)
		}
	}
}

// age is the seconds since at, 0 when there is nothing to date.
func age(now, at time.Time) float64 {
	if at.IsZero() {
		return 0
	}
	return max(now.Sub(at).Seconds(), 0)
}

// withConfigured is st with an empty entry for each configured tenant it
// lacks: a tenant with nothing stored yet has every gauge, at zero. With
// no tenant configured and none stored, an entry of no tenant: the
// families exist from the first scrape.
func (c *storeCollector) withConfigured(st []ledger.TenantStats) []ledger.TenantStats {
	if len(st) == 0 && len(c.tenants) == 0 {
		return []ledger.TenantStats{{}}
	}
	st = slices.Clip(st) // st is shared with other scrapes: appending copies it
	seen := make(map[string]bool, len(st))
	for _, t := range st {
		seen[t.Tenant] = true
	}
	for _, name := range c.tenants {
		if !seen[name] {
			seen[name] = true
			st = append(st, ledger.TenantStats{Tenant: name})
		}
	}
	return st
}
