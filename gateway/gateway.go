package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/limits"
	"github.com/idemgate/idemgate/metrics"
)

// ControlPrefix is where the control API lives, on the same listener.
const ControlPrefix = contract.ControlPrefix

// Gateway serves one configuration over one store.
type Gateway struct {
	cfg     *Config
	store   ledger.Store
	log     *slog.Logger
	handler http.Handler
	limits  *limits.Limiter
	events  *ledger.EventBatcher // nil without an audit section
	metrics *metrics.Metrics
	clients map[string]*upstreamClient // by upstream name
}

// New builds the gateway. The store must be migrated.
func New(cfg *Config, store ledger.Store, log *slog.Logger) (*Gateway, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, store: store, log: log, metrics: metrics.New(metrics.Options{Store: store})}
	if cfg.Audit != nil {
		g.events = ledger.NewEventBatcher(store, 0, log)
	}
	g.limits = limits.New(limits.Options{Usage: store.Usage, Policy: cfg.Policy, Resync: cfg.Limits.UsageInterval,
		OnError: func(tenant string, err error) {
			log.Error("read usage", slog.String("tenant", tenant), slog.String("error", err.Error()))
		}})
	routes, m, err := g.routes()
	if err != nil {
		return nil, err
	}
	control, err := g.control(m)
	if err != nil {
		return nil, err
	}
	page, err := g.ui(m)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", g.ready)
	if cfg.MetricsListen == "" {
		mux.Handle("GET /metrics", g.metrics.Handler())
	}
	mux.Handle(ControlPrefix+"/", g.authenticated(control))
	mux.Handle(UIPrefix, page) // its own sessions: no bearer token in a browser
	mux.Handle("/", g.authenticated(routes))
	g.handler = g.logged(hygienic(mux))
	return g, nil
}

// Close writes the audit events still queued; call it once the server has
// stopped, before the store closes.
func (g *Gateway) Close() {
	if g.events != nil {
		g.events.Close()
	}
}

// observer is what observes the requests: the metrics, or none (a nil
// interface, not a nil pointer).
func (g *Gateway) observer() httpidem.Observer {
	if g.cfg.Unobserved {
		return nil
	}
	return g.metrics
}

// Metrics is the gateway's metrics: its /metrics handler (served by
// NewMetricsServer when metrics_listen is set), and the dashboard's
// history.
func (g *Gateway) Metrics() *metrics.Metrics { return g.metrics }

// Handler is the gateway's whole HTTP surface.
func (g *Gateway) Handler() http.Handler { return g.handler }

func (g *Gateway) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := g.store.Ping(ctx); err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// routes builds the configured routes: writes behind the idempotency
// middleware, reads proxied as they are, and 404 for everything else. Roles
// are checked first, so a forbidden request reserves nothing.
func (g *Gateway) routes() (http.Handler, *httpidem.Middleware, error) {
	clients := map[string]*upstreamClient{}
	for name, u := range g.cfg.Upstreams {
		clients[name] = newUpstreamClient(name, u, g.log)
	}
	g.clients = clients
	var writes []httpidem.Route
	for _, rc := range g.cfg.Routes {
		if rc.IsWrite() {
			route, err := g.writeRoute(rc, clients[rc.Upstream])
			if err != nil {
				return nil, nil, err
			}
			writes = append(writes, route)
		}
	}
	m, err := httpidem.New(httpidem.Options{Store: g.store, Routes: writes, Tenant: tenantOf, Principal: principalOf,
		Actor: "gateway:" + g.cfg.Instance, MaxResponse: int64(g.cfg.MaxResponse), StatusBase: ControlPrefix,
		RecordDeadline: g.cfg.RecordDeadline, Logger: g.log, Admit: g.admit, Recorded: g.recorded, Audit: g.recorder(),
		Observer: g.observer()})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", g.cfg.file, err)
	}
	mux := http.NewServeMux()
	for _, rc := range g.cfg.Routes {
		uc := clients[rc.Upstream]
		var h http.Handler = uc.plain
		if rc.IsWrite() {
			h = m.Handler(writeProxy{uc: uc, maxResponse: int64(g.cfg.MaxResponse), hold: g.cfg.HoldBeforeForward})
		}
		mux.Handle(rc.method+" "+rc.pattern, g.limited(g.allowed(rc, h)))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		contract.NewProblem(contract.CodeNotFound, "no route for "+r.Method+" "+r.URL.Path).Write(w)
	})
	return mux, m, nil
}

func (g *Gateway) writeRoute(rc *RouteConfig, uc *upstreamClient) (httpidem.Route, error) {
	route := httpidem.Route{Method: rc.method, Pattern: rc.pattern, RequireKey: rc.RequireKey, KeyFrom: rc.KeyFrom,
		Headers: rc.Fingerprint.Headers, Ignore: rc.Fingerprint.Ignore, IgnoreQuery: rc.Fingerprint.IgnoreQuery,
		Opaque: rc.Body == "opaque", BusinessKey: rc.BusinessKey,
		ConcurrencyKey: rc.ConcurrencyKey, Lease: rc.Lease, Retention: rc.Retention, MaxBody: int64(rc.MaxBody),
		Resend: uc.cfg.HonoursKey, Classify: classifier(rc), Approval: rc.policy, ResultRef: rc.ResultRef,
		Probe: routeProbe(rc)}
	if rc.Schema != "" {
		v, err := loadSchema(rc.Schema)
		if err != nil {
			return route, g.cfg.errorf(rc.line, "route %s: schema: %v", rc.Match, err)
		}
		route.Validate = v
	}
	return route, nil
}

// classifier is docs/design.md's mapping with the route's own exceptions.
func classifier(rc *RouteConfig) func(int) contract.Fate {
	notApplied, final := rc.Outcomes.NotApplied, rc.Outcomes.Final
	return func(status int) contract.Fate {
		switch {
		case slices.Contains(notApplied, status):
			return contract.FateReleased
		case slices.Contains(final, status):
			return contract.FateFailed
		}
		return contract.DefaultClassify(status)
	}
}

// principalOf is the caller as approvals see it: who requests, who decides.
func principalOf(r *http.Request) (approval.Principal, error) {
	if p := PrincipalFrom(r.Context()); p != nil {
		return approval.Principal{Name: p.Name, Tenant: p.Tenant, Roles: p.Roles}, nil
	}
	return approval.Principal{}, errors.New("no principal")
}

func tenantOf(r *http.Request) (string, error) {
	if p := PrincipalFrom(r.Context()); p != nil {
		return p.Tenant, nil
	}
	return "", errors.New("no principal")
}

// authenticated refuses requests without a known bearer token.
func (g *Gateway) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := g.authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idemgate"`)
			contract.NewProblem(contract.CodeUnauthorized, err.Error()).Write(w)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// limited applies the tenant's request rate to every proxied request,
// reads included: 429 rate_limited with Retry-After, nothing reserved.
func (g *Gateway) limited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := g.limits.Request(PrincipalFrom(r.Context()).Tenant); ref != nil {
			refused(ref).Write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// admit applies the tenant's budgets of live operations and stored bytes
// to a request that would reserve a new operation.
func (g *Gateway) admit(ctx context.Context, tenant string) (func(live bool), *contract.Problem) {
	settle, ref := g.limits.NewOperation(ctx, tenant)
	if ref != nil {
		return nil, refused(ref)
	}
	return settle, nil
}

// recorded counts a stored response against its tenant's budget.
func (g *Gateway) recorded(op *ledger.Operation) {
	if op.Response != nil {
		n := len(op.Response.Body)
		for k, v := range op.Response.Header {
			n += len(k) + len(strings.Join(v, ""))
		}
		g.limits.Stored(op.Tenant, int64(n))
	}
}

// refused is the problem of a request over its tenant's limits.
func refused(r *limits.Refusal) *contract.Problem {
	p := contract.NewProblem(contract.CodeRateLimited, r.Reason+"; nothing was done, retry with the same key later")
	p.RetryAfter = int(math.Ceil(r.RetryAfter.Seconds()))
	return p
}

// allowed applies a route's roles.
func (g *Gateway) allowed(rc *RouteConfig, next http.Handler) http.Handler {
	if len(rc.Roles) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := PrincipalFrom(r.Context())
		if !slices.ContainsFunc(rc.Roles, p.HasRole) {
			contract.NewProblem(contract.CodeForbidden, "this route needs one of the roles "+fmt.Sprint(rc.Roles)).Write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}
