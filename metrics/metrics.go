// Package metrics is the gateway's Prometheus metrics (docs/design.md,
// "Metrics"): the ten indicators of the workflow article, request and
// upstream latencies, and gauges read from the store at scrape time, so
// that instances sharing a store report the same. Labels are bounded: a
// route template, a tenant, an outcome; never a key or an operation id.
package metrics

import (
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// Metrics is one gateway's registry. It implements keyed.Observer.
type Metrics struct {
	reg *prometheus.Registry

	created, duplicates, avoided, conflicts *prometheus.CounterVec
	retries, resolutions, found             *prometheus.CounterVec
	leaseExpiries, approvalExpiries         prometheus.Counter
	fenced, storeErrors                     prometheus.Counter
	reconcile                               *prometheus.HistogramVec
	requests, upstream                      *prometheus.HistogramVec

	reload  *reloadMetrics
	tls     *tlsMetrics
	history *History
	store   *storeCollector        // nil without a store
	queues  *consumerMetrics       // the consumers' parks and connections
	mcp     *mcpMetrics            // the MCP proxy's sessions; nil without one
	own     []prometheus.Collector // idemgate's families, for Described
	tenants []string               // the configuration's, sorted
}

// Options configure the metrics.
type Options struct {
	// Store is read at scrape time for the gauges; nil for none.
	Store Store
	// StatsTTL bounds how often a scrape reads the store (default 1s): a
	// burst of scrapes reads it once.
	StatsTTL time.Duration
	// Tenants are the configuration's tenants: each one's series exist
	// from the start, at zero (with each route, once Routes names them),
	// as Prometheus's guidance asks, so that a rate() or an alert on a
	// series works from the first scrape, not only after its first event.
	// With none (a gateway whose callers all bring JWTs, and no
	// tenants:), each per-tenant family starts with one series of no
	// tenant (tenant=""), at zero, which nothing counts.
	Tenants []string
	// Consumers are the configuration's consumers, by name: each one's
	// series start at zero (parks by the reasons inbox names).
	Consumers []string
	// MCP says the gateway proxies MCP servers: the families of its
	// client sessions exist.
	MCP bool
}

var _ keyed.RouteObserver = (*Metrics)(nil)

func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "idemgate", Name: name, Help: help}, labels)
}

// New builds the registry: the process and Go collectors, the gateway's
// counters and histograms, and the store's gauges.
func New(o Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(),
		created: counter("operations_created_total",
			"Operations created: new keys reserved, counted once whatever path the operation then takes (run at "+
				"once, or approved and run later) (indicator 1).", "route", "tenant"),
		duplicates: counter("duplicates_recognised_total",
			"Requests recognised as a repeat of an operation: a retry replayed (kind=replay) or a new key with an "+
				"existing business identity (kind=business_key) (indicator 2).", "route", "tenant", "kind"),
		avoided: counter("upstream_calls_avoided_total",
			"Keyed requests answered without calling the upstream: replays, duplicates, refusals of a retry "+
				"in progress or unknown, conflicts, locks (indicator 3).", "route", "tenant"),
		conflicts: counter("fingerprint_conflicts_total",
			"Keys reused with another request: 422 fingerprint_mismatch (indicator 4).", "route", "tenant"),
		retries: counter("retries_total",
			"Retries: requests repeating an operation (its key and its fingerprint), by what they met: replay, "+
				"in_progress, outcome_unknown, approval, or the family of the refusal that released it (rate_limited, "+
				"…); another request under a used key is a fingerprint conflict, not a retry (indicator 8).",
			"route", "tenant", "family"),
		resolutions: counter("manual_resolutions_total",
			"Unknown operations resolved by an operator, by the state chosen (indicator 9).", "tenant", "to"),
		found: counter("business_duplicates_found_total",
			"Operations an operator resolved as a duplicate of an effect already made, despite the checks: the "+
				"indicator that matters most (indicator 10).", "tenant"),
		leaseExpiries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idemgate",
			Name: "lease_expirations_total",
			Help: "Executing operations whose lease lapsed, made unknown by this instance's sweep (indicator 5)."}),
		approvalExpiries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idemgate",
			Name: "approval_expirations_total", Help: "Approvals expired by this instance's sweep."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idemgate", Name: "fencing_rejections_total",
			Help: "Owner steps refused because a newer lease fenced them off."}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idemgate", Name: "store_errors_total",
			Help: "Store failures: unavailable, or a stats read that failed."}),
		reconcile: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "idemgate",
			Name: "reconcile_duration_seconds", Help: "How long operations stayed unknown before an operator " +
				"resolved them (indicator 7).",
			Buckets: []float64{10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600}}, []string{"tenant"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "idemgate",
			Name: "request_duration_seconds", Help: "Keyed requests through the gateway, by route and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"route", "outcome"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "idemgate",
			Name: "upstream_duration_seconds", Help: "Calls of the upstream, by route and status class.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"route", "class"}),
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Register(m.created, m.duplicates, m.avoided, m.conflicts, m.retries, m.resolutions, m.found, m.leaseExpiries,
		m.approvalExpiries, m.fenced, m.storeErrors, m.reconcile, m.requests, m.upstream)
	m.queues = newConsumerMetrics(m, o.Consumers)
	m.mcp = newMCPMetrics(m, o.MCP)
	if o.Store != nil {
		m.store = newStoreCollector(o.Store, o.StatsTTL, m.storeErrors, o.Tenants)
		m.Register(m.store)
		if cs, ok := o.Store.(Commits); ok {
			m.Register(newCommitCollector(cs))
		}
	}
	m.tenants = slices.Compact(slices.Sorted(slices.Values(o.Tenants)))
	if len(m.tenants) == 0 {
		m.tenants = []string{""} // the families exist, whatever the authentication
	}
	for _, t := range m.tenants {
		for _, to := range []ledger.State{ledger.Succeeded, ledger.Failed, ledger.Prepared} {
			m.resolutions.WithLabelValues(t, string(to))
		}
		m.found.WithLabelValues(t)
		m.reconcile.WithLabelValues(t)
	}
	m.reload = newReloadMetrics(m.reg)
	m.tls = newTLSMetrics(m)
	m.history = newHistory(m)
	return m
}

// retryFamilies are the retries' families known before any happens: what
// a retry meets of its operation, besides the refusals that released it.
var retryFamilies = []string{keyed.RetryReplay, contract.CodeInProgress, contract.CodeOutcomeUnknown,
	keyed.RetryApproval}

// duplicateKinds are the kinds of duplicates recognised.
var duplicateKinds = []string{"replay", "business_key"}

// Routes implements keyed.RouteObserver: each route's series, with
// each tenant's, start at zero.
func (m *Metrics) Routes(names []string) {
	for _, route := range names {
		m.requests.WithLabelValues(route, keyed.OutcomeCreated)
		m.upstream.WithLabelValues(route, "2xx")
		for _, t := range m.tenants {
			m.created.WithLabelValues(route, t)
			m.avoided.WithLabelValues(route, t)
			m.conflicts.WithLabelValues(route, t)
			for _, kind := range duplicateKinds {
				m.duplicates.WithLabelValues(route, t, kind)
			}
			for _, family := range retryFamilies {
				m.retries.WithLabelValues(route, t, family)
			}
		}
	}
}

// Register adds idemgate collectors (a consumer's, the reload's, …) to the
// registry. Each family must be present from the first scrape, with its
// known label values at zero: TestEveryFamilyFromTheFirstScrape holds
// every collector registered here to that, so register through here, not
// through Registry.
func (m *Metrics) Register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.own = append(m.own, cs...)
}

// Described lists the descriptions of idemgate's own collectors: every
// family the gateway may ever expose.
func (m *Metrics) Described() []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range m.own {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// Handler serves the registry in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: nil, Registry: m.reg})
}

// Registry is the registry, for tests and for more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// avoidedBy lists the outcomes answered without calling the upstream.
var avoidedBy = map[string]bool{keyed.OutcomeReplayed: true, keyed.OutcomeDuplicate: true,
	contract.CodeInProgress: true, contract.CodeOutcomeUnknown: true, contract.CodeFingerprintMismatch: true,
	contract.CodeConcurrencyLocked: true}

// Request implements keyed.Observer.
func (m *Metrics) Request(o keyed.Observation) {
	m.requests.WithLabelValues(o.Route, o.Outcome).Observe(o.Duration.Seconds())
	if o.Created {
		m.created.WithLabelValues(o.Route, o.Tenant).Inc()
		m.history.add(o.Tenant, iCreated)
	}
	switch o.Outcome {
	case keyed.OutcomeReplayed:
		m.duplicates.WithLabelValues(o.Route, o.Tenant, "replay").Inc()
		m.history.add(o.Tenant, iDuplicates)
	case keyed.OutcomeDuplicate:
		m.duplicates.WithLabelValues(o.Route, o.Tenant, "business_key").Inc()
		m.history.add(o.Tenant, iDuplicates)
	case contract.CodeFingerprintMismatch:
		m.conflicts.WithLabelValues(o.Route, o.Tenant).Inc()
		m.history.add(o.Tenant, iConflicts)
	}
	if avoidedBy[o.Outcome] {
		m.avoided.WithLabelValues(o.Route, o.Tenant).Inc()
		m.history.add(o.Tenant, iAvoided)
	}
	if o.Retry != "" {
		m.retries.WithLabelValues(o.Route, o.Tenant, o.Retry).Inc()
		m.history.add(o.Tenant, iRetries)
	}
}

// Upstream implements keyed.Observer.
func (m *Metrics) Upstream(route string, status int, d time.Duration) {
	m.upstream.WithLabelValues(route, statusClass(status)).Observe(d.Seconds())
}

// statusClass is "2xx" … "5xx", or "none" for no answer.
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "none"
	}
	return string(rune('0'+status/100)) + "xx"
}

// Failure implements keyed.Observer.
func (m *Metrics) Failure(kind string) {
	switch kind {
	case keyed.FailureFenced:
		m.fenced.Inc()
	case keyed.FailureStore:
		m.storeErrors.Inc()
	}
}

// LeasesExpired counts leases this instance's sweep made unknown.
func (m *Metrics) LeasesExpired(n int) { m.leaseExpiries.Add(float64(n)) }

// ApprovalsExpired counts approvals this instance's sweep expired.
func (m *Metrics) ApprovalsExpired(n int) { m.approvalExpiries.Add(float64(n)) }

// Resolved counts an operator's resolution of an operation unknown for
// unknownFor; duplicate says the operator found the effect made twice.
func (m *Metrics) Resolved(tenant string, to ledger.State, unknownFor time.Duration, duplicate bool) {
	m.resolutions.WithLabelValues(tenant, string(to)).Inc()
	m.reconcile.WithLabelValues(tenant).Observe(unknownFor.Seconds())
	m.history.add(tenant, iResolutions)
	m.history.reconciled(tenant, unknownFor)
	if duplicate {
		m.found.WithLabelValues(tenant).Inc()
		m.history.add(tenant, iFound)
	}
}

// History is the indicators' recent history, for the dashboard.
func (m *Metrics) History() *History { return m.history }
