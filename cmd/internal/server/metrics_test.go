package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/contract"
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
	"replays":     "idemgate_retries_total{family=replay}",
	"resolutions": "idemgate_manual_resolutions_total",
	"found":       "idemgate_business_duplicates_found_total",
}

// metricsText reads /metrics.
func (e *env) metricsText() string {
	e.t.Helper()
	r := e.do("GET", "/metrics", "scraper-token", "")
	if r.status != 200 {
		e.t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	return r.body
}

// scrape reads /metrics and parses it.
func (e *env) scrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(e.metricsText()))
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
	e.moved("a retry", map[string]float64{"duplicates": 1, "avoided": 1, "retries": 1, "replays": 1},
		func() { post("/v1/tickets", "m-1", `{"t":1}`) })
	// Another request under a used key is a conflict, not a retry of it.
	e.moved("a changed payload", map[string]float64{"conflicts": 1, "avoided": 1},
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

// approvalRoute asks for an admin's approval of every write to its path.
const approvalRoute = `  - {match: POST /v1/policy/prod, upstream: ops, approval: {approvers: [admin], ttl: 1m, summary: 'Deploy'}}
`

// awaited is the approval a 202 answer waits for, as the store holds it;
// the answer carries the fingerprint a decision must echo.
func (e *env) awaited(r reply) *ledger.Approval {
	e.t.Helper()
	var acc contract.Accepted
	if err := json.Unmarshal([]byte(r.body), &acc); err != nil || r.status != 202 {
		e.t.Fatalf("not waiting for an approval: %d %s", r.status, r.body)
	}
	a, err := e.store.GetApproval(context.Background(), acc.Approval.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	if acc.Approval.Fingerprint != a.Fingerprint {
		e.t.Fatalf("the 202 carries fingerprint %q, the approval is of %q", acc.Approval.Fingerprint, a.Fingerprint)
	}
	return a
}

// TestMetricsCountEachOperationOnce: the operations created, by
// whichever path they take (run at once, approved and then run, denied,
// retried, refused as a conflict), count what the store holds; the
// operations run count what the upstream did.
func TestMetricsCountEachOperationOnce(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, approvalRoute)
	post := func(path, key, body string) reply {
		return e.do("POST", path, "agent-token", body, "Idempotency-Key", key)
	}
	decide := func(r reply, verb string) {
		t.Helper()
		a := e.awaited(r)
		if d := e.do("POST", "/_idem/v1/approvals/"+a.ID+"/"+verb, "alice-token",
			fmt.Sprintf(`{"fingerprint":%q,"note":"checked"}`, a.Fingerprint)); d.status != 200 {
			t.Fatalf("%s: %d %s", verb, d.status, d.body)
		}
	}
	post("/v1/tickets", "t-1", `{"n":1}`)
	post("/v1/tickets", "t-1", `{"n":1}`)
	post("/v1/tickets", "t-1", `{"n":2}`)
	decide(post("/v1/policy/prod", "p-1", `{"v":1}`), "approve")
	if r := post("/v1/policy/prod", "p-1", `{"v":1}`); r.status != 201 {
		t.Fatalf("the approved write: %d %s", r.status, r.body)
	}
	post("/v1/policy/prod", "p-1", `{"v":1}`)
	decide(post("/v1/policy/prod", "p-2", `{"v":2}`), "deny")
	post("/v1/policy/prod", "p-2", `{"v":2}`)
	fams := e.scrape()
	if got, want := value(fams, indicators["created"]), float64(len(e.operations())); got != want || want != 3 {
		t.Errorf("operations created: the counter says %v, the store holds %v (want 3)", got, want)
	}
	if got, want := value(fams, "idemgate_upstream_duration_seconds"), float64(e.up.count("/v1/tickets")+
		e.up.count("/v1/policy/prod")); got != want || want != 2 {
		t.Errorf("upstream calls: the histogram says %v, the upstream made %v effects (want 2)", got, want)
	}
	if got := value(fams, "idemgate_retries_total{family=replay}"); got != 3 {
		t.Errorf("replays counted %v, want 3 (t-1, p-1 and p-2 again; the conflict is none)", got)
	}
}

// TestMetricsFamiliesFromTheStart: a gateway that has served nothing
// exposes every family it will ever count, at zero for each configured
// route and tenant, so that a rate() works from the first scrape.
func TestMetricsFamiliesFromTheStart(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, "")
	text := e.metricsText()
	fams := e.scrape()
	for _, name := range []string{"idemgate_operations_created_total", "idemgate_duplicates_recognised_total",
		"idemgate_upstream_calls_avoided_total", "idemgate_fingerprint_conflicts_total", "idemgate_retries_total",
		"idemgate_manual_resolutions_total", "idemgate_business_duplicates_found_total",
		"idemgate_reconcile_duration_seconds", "idemgate_request_duration_seconds",
		"idemgate_upstream_duration_seconds", "idemgate_lease_expirations_total",
		"idemgate_approval_expirations_total", "idemgate_fencing_rejections_total", "idemgate_store_errors_total",
		"idemgate_operations", "idemgate_operations_stuck", "idemgate_oldest_operation_age_seconds",
		"idemgate_approvals_pending", "idemgate_oldest_pending_approval_age_seconds",
		"idemgate_store_stats_read_seconds"} {
		if fams[name] == nil {
			t.Errorf("a fresh gateway has no family %s", name)
		}
	}
	for _, series := range []string{
		`idemgate_operations_created_total{route="POST /v1/tickets",tenant="acme"} 0`,
		`idemgate_operations_created_total{route="POST /v1/tickets",tenant="globex"} 0`,
		`idemgate_retries_total{family="replay",route="POST /v1/lost",tenant="acme"} 0`,
		`idemgate_duplicates_recognised_total{kind="business_key",route="POST /v1/policy/alerts",tenant="acme"} 0`,
		`idemgate_manual_resolutions_total{tenant="acme",to="succeeded"} 0`,
		`idemgate_operations{state="unknown",tenant="globex"} 0`,
	} {
		if !strings.Contains(text, series) {
			t.Errorf("no series %s", series)
		}
	}
}

// TestMetricsNeedARole: /metrics on the main listener, which names every
// tenant and route, is served only to a principal holding the metrics or
// the admin role.
func TestMetricsNeedARole(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, "")
	for _, c := range []struct {
		token  string
		status int
	}{{"", 401}, {"guess", 401}, {"agent-token", 403}, {"globex-token", 403}, {"scraper-token", 200}, {"alice-token", 200}} {
		r := e.do("GET", "/metrics", c.token, "")
		if r.status != c.status || (c.status == 200) != strings.Contains(r.body, `tenant="globex"`) {
			t.Errorf("/metrics with %q: %d, want %d: %.200s", c.token, r.status, c.status, r.body)
		}
	}
}

// TestMetricsFamiliesWithJWTOnly: a gateway whose callers all come with
// JWTs (no configured principal, so no tenant known before the first
// request) exposes every family from the first scrape, as one with
// static principals does: with the tenants tenants: declares, each at
// zero; with none declared, a series of no tenant at zero.
func TestMetricsFamiliesWithJWTOnly(t *testing.T) {
	t.Parallel()
	p := startIDP(t)
	for name, tenants := range map[string]string{"declared": "tenants: [acme, globex]\n", "none declared": ""} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.SQLiteDB(t)
			text := fmt.Sprintf("store: %s\nupstreams: {ops: {url: http://127.0.0.1:1}}\n"+
				"routes: [{match: POST /v1/tickets, upstream: ops}]\n"+
				"auth: {jwt: {issuer: %q, audience: idemgate, jwks_url: %q, tenant_claim: org}}\n%s",
				db.DSN, p.Issuer, p.JWKSURL, tenants)
			s, err := server.New(loadConfig(t, t.TempDir(), text), db.Open(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			fams, err := s.Metrics().Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			scraped := map[string]*dto.MetricFamily{}
			for _, f := range fams {
				scraped[f.GetName()] = f
			}
			for _, d := range s.Metrics().Described() {
				name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]
				if scraped[name] == nil && name != "idemgate_audit_checkpoint_age_seconds" {
					t.Errorf("family %s is not in the first scrape", name)
				}
			}
			if tenants != "" && !hasSeries(scraped["idemgate_operations_created_total"], "tenant", "globex") {
				t.Error("no series of a declared tenant")
			}
		})
	}
}

// hasSeries reports whether a family has a series with label=value.
func hasSeries(f *dto.MetricFamily, label, value string) bool {
	if f == nil {
		return false
	}
	for _, m := range f.Metric {
		for _, l := range m.Label {
			if l.GetName() == label && l.GetValue() == value {
				return true
			}
		}
	}
	return false
}
