package server_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/ledger/storetest"
)

// The ten indicators as the scrape names them (a gauge's series selected
// by a label where it needs one).
var indicators = map[string]string{
	"created":     "idemgate_operations_created_total",
	"duplicates":  "idemgate_duplicates_recognised_total",
	"avoided":     "idemgate_upstream_calls_avoided_total",
	"conflicts":   "idemgate_fingerprint_conflicts_total",
	"stuck":       "idemgate_operations_stuck",
	"unknown":     "idemgate_operations{state=unknown}",
	"reconcile":   "idemgate_reconcile_duration_seconds",
	"retries":     "idemgate_retries_total",
	"resolutions": "idemgate_manual_resolutions_total",
	"found":       "idemgate_business_duplicates_found_total",
}

// scrape reads /metrics and parses it.
func (e *env) scrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	r := e.do("GET", "/metrics", "", "")
	if r.status != 200 {
		e.t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(r.body))
	if err != nil {
		e.t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value sums a family's series (those with label=value, for a selector
// name{label=value}); a histogram counts its observations.
func value(fams map[string]*dto.MetricFamily, selector string) float64 {
	name, sel, _ := strings.Cut(strings.TrimSuffix(selector, "}"), "{")
	label, want, _ := strings.Cut(sel, "=")
	f := fams[name]
	if f == nil {
		return 0
	}
	sum := 0.0
	for _, m := range f.Metric {
		if label != "" && !slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool {
			return l.GetName() == label && l.GetValue() == want
		}) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// moved runs act and checks that exactly the indicators in want moved,
// by those amounts. Gauges are read from the store at most once a second:
// the scrape after the act waits for a fresh read.
func (e *env) moved(what string, want map[string]float64, act func()) {
	e.t.Helper()
	before := e.scrape()
	act()
	time.Sleep(1100 * time.Millisecond)
	after := e.scrape()
	for name, sel := range indicators {
		if got := value(after, sel) - value(before, sel); got != want[name] {
			e.t.Errorf("%s: %s moved by %v, want %v", what, name, got, want[name])
		}
	}
}

// TestMetricsIndicators: each of the ten indicators moves when its event
// happens, and only the indicators that event is an instance of move.
func TestMetricsIndicators(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	store := db.Open(t)
	e := newEnv(t, store, db.DSN, "")
	post := func(path, key, body string) reply {
		return e.do("POST", path, "agent-token", body, "Idempotency-Key", key)
	}
	e.moved("a new key", map[string]float64{"created": 1}, func() { post("/v1/tickets", "m-1", `{"t":1}`) })
	e.moved("a retry", map[string]float64{"duplicates": 1, "avoided": 1, "retries": 1},
		func() { post("/v1/tickets", "m-1", `{"t":1}`) })
	e.moved("a changed payload", map[string]float64{"conflicts": 1, "avoided": 1, "retries": 1},
		func() { post("/v1/tickets", "m-1", `{"t":2}`) })
	post("/v1/policy/alerts", "a-1", `{"source_event_id":"e-1"}`)
	e.moved("a business duplicate", map[string]float64{"duplicates": 1, "avoided": 1},
		func() { post("/v1/policy/alerts", "a-2", `{"source_event_id":"e-1"}`) })
	var lost reply
	e.moved("a lost answer", map[string]float64{"created": 1, "unknown": 1},
		func() { lost = post("/v1/lost", "l-1", `{}`) })
	e.moved("a retry of an unknown one", map[string]float64{"avoided": 1, "retries": 1},
		func() { post("/v1/lost", "l-1", `{}`) })
	e.moved("a resolution as a duplicate", map[string]float64{"unknown": -1, "resolutions": 1, "reconcile": 1,
		"found": 1}, func() {
		r := e.do("POST", "/_idem/v1/operations/"+lost.header.Get("Idempotency-Operation")+"/resolve", "alice-token",
			`{"state":"succeeded","note":"charged twice at the provider","duplicate":true}`)
		if r.status != 200 {
			t.Fatalf("resolve: %d %s", r.status, r.body)
		}
	})
	e.moved("an owner gone", map[string]float64{"stuck": 1}, func() {
		p := storetest.Params(time.Microsecond)
		if _, err := store.Reserve(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	})
	fams := e.scrape()
	if v := value(fams, "idemgate_request_duration_seconds"); v < 7 {
		t.Errorf("request latencies observed %v times", v)
	}
	if v := value(fams, "idemgate_upstream_duration_seconds"); v != 3 {
		t.Errorf("upstream calls observed %v times, want 3 (m-1, a-1, l-1)", v)
	}
	noKeyInLabels(t, fams, "m-1", "a-1", "a-2", "l-1", "e-1", "op_", "agent-token")
}

// noKeyInLabels fails if any label value holds one of the strings.
func noKeyInLabels(t *testing.T, fams map[string]*dto.MetricFamily, secrets ...string) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		for _, m := range fams[name].Metric {
			for _, l := range m.Label {
				for _, s := range secrets {
					if strings.Contains(l.GetValue(), s) {
						t.Errorf("%s{%s=%q} holds %q", name, l.GetName(), l.GetValue(), s)
					}
				}
			}
		}
	}
}

// TestMetricsInstancesAgree: two gateways on one PostgreSQL report the
// same state gauges, read from the store, whichever served the writes.
func TestMetricsInstancesAgree(t *testing.T) {
	t.Parallel()
	db := dbtest.PostgresDB(t)
	one := newEnv(t, db.Open(t), db.DSN, "")
	two := newEnv(t, db.Open(t), db.DSN, "")
	for i, e := range []*env{one, two, one} {
		if r := e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "k-"+string(rune('a'+i))); r.status != 201 {
			t.Fatalf("write %d: %d", i, r.status)
		}
	}
	one.do("POST", "/v1/lost", "agent-token", `{}`, "Idempotency-Key", "lost")
	a, b := one.scrape(), two.scrape()
	for _, st := range ledger.States {
		sel := "idemgate_operations{state=" + string(st) + "}"
		if value(a, sel) != value(b, sel) {
			t.Errorf("%s: %v on one instance, %v on the other", sel, value(a, sel), value(b, sel))
		}
	}
	if value(a, "idemgate_operations{state=succeeded}") != 3 || value(b, "idemgate_operations{state=unknown}") != 1 {
		t.Fatalf("the gauges do not show the store: %v succeeded, %v unknown",
			value(a, "idemgate_operations{state=succeeded}"), value(b, "idemgate_operations{state=unknown}"))
	}
}
