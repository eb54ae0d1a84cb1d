// Package gateway is the data plane of `idemgate serve` in front of any
// HTTP API: the authentication of callers (bearer tokens, JWTs, client
// certificates, webhook signatures), TLS, limits, routing, and the reverse
// proxy that holds each upstream's credentials and is the effect of the
// keyed executor's HTTP adapter (package httpidem), with the outcome
// mapping, actions' reservations and the consumers' delivery. Its
// configuration is package config's; the control API is package
// control's; cmd/internal/server mounts them on one listener.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"github.com/idemgate/idemgate/config"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/limits"
)

// Deps are what a gateway is built with. The composition root
// (cmd/internal/server) makes them: the gateway builds only what its
// configuration says (its upstreams, its routes behind the idempotency
// middleware, its principals), and the control API, the web page and the
// background work are their own planes, mounted beside it.
type Deps struct {
	Store  keyed.Store
	Logger *slog.Logger
	// Limits applies each tenant's request rate and budgets (required).
	Limits *limits.Limiter
	// Observer hears how each keyed request ended (the metrics); nil for
	// none.
	Observer keyed.Observer
	// Audit records the events that are no transition (replays,
	// conflicts): the audit batcher, or nil without an audit section.
	Audit keyed.Recorder
	// Transport, if set, wraps each upstream's transport for the calls of
	// the routes (traces: a client span, and traceparent); probes are
	// not wrapped.
	Transport func(http.RoundTripper) http.RoundTripper
}

// Gateway is one configuration's data plane in front of its upstreams:
// authentication, roles, limits, the idempotency middleware on the write
// routes, and the reverse proxy.
type Gateway struct {
	cfg     *config.Config
	store   keyed.Store
	log     *slog.Logger
	limits  *limits.Limiter
	x       *keyed.Executor
	routes  http.Handler
	actions http.Handler
	shapes  *shapes  // nil: every refusal is RFC 9457's
	jwt     *jwtAuth // nil without auth.jwt
	// consumers are each consumer's way to its upstream, by name.
	consumers map[string]*consumer
}

// New builds the gateway's routes. The store must be migrated.
func New(cfg *config.Config, d Deps) (*Gateway, error) {
	if d.Store == nil || d.Limits == nil {
		return nil, errors.New("gateway: Deps.Store and Deps.Limits are required")
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, store: d.Store, log: d.Logger, limits: d.Limits}
	if cfg.Auth.JWT != nil {
		g.jwt = newJWTAuth(cfg.Auth.JWT, d.Logger)
	}
	if err := g.build(d); err != nil {
		return nil, err
	}
	return g, nil
}

// Routes are the configured routes, each behind bearer authentication
// (a webhook route behind its sender's signature instead): writes behind
// the idempotency middleware, reads proxied as they are, and 404 for
// everything else.
func (g *Gateway) Routes() http.Handler { return g.routes }

// Front wraps the gateway's whole listener (its routes, the control API,
// the web page, the probes): header hygiene refuses what must never be
// forwarded before anything else runs, each refusal takes the shape of
// its route's upstream, and each request is logged.
func (g *Gateway) Front(h http.Handler) http.Handler { return g.logged(g.shaping(hygienic(h))) }

// Changed wakes the requests of this process waiting on an operation
// (Prefer: wait) that changed elsewhere: decided or resolved on the
// control API or the web page.
func (g *Gateway) Changed(opID string) { g.x.Changed(opID) }

// build makes the upstreams' clients, the executor every surface of
// this configuration shares, and the routes' handler.
func (g *Gateway) build(d Deps) error {
	clients := map[string]*upstreamClient{}
	for name, u := range g.cfg.Upstreams {
		clients[name] = newUpstreamClient(name, u, g.log, d.Transport)
	}
	var writes []httpidem.Route
	for _, rc := range g.cfg.Routes {
		if rc.IsWrite() {
			route, err := g.writeRoute(rc, clients[rc.Upstream])
			if err != nil {
				return err
			}
			writes = append(writes, route)
		}
	}
	for _, a := range g.cfg.Actions {
		route, err := g.actionRoute(a)
		if err != nil {
			return err
		}
		writes = append(writes, route)
	}
	x, err := keyed.New(keyed.Options{Store: g.store, Actor: "gateway:" + g.cfg.Instance,
		RecordDeadline: g.cfg.RecordDeadline, StatusBase: contract.ControlPrefix, Logger: g.log, Admit: g.admit,
		Recorded: g.recorded, Audit: d.Audit, Observer: d.Observer})
	if err != nil {
		return err
	}
	g.x = x
	m, err := httpidem.New(httpidem.Options{Executor: x, Routes: writes, Tenant: tenantOf, Principal: principalOf,
		MaxResponse: int64(g.cfg.MaxResponse), StatusBase: contract.ControlPrefix, Logger: g.log})
	if err != nil {
		return fmt.Errorf("%s: %w", g.cfg.File(), err)
	}
	mux := http.NewServeMux()
	for _, rc := range g.cfg.Routes {
		uc := clients[rc.Upstream]
		var h http.Handler = uc.plain
		if rc.IsWrite() {
			h = m.Handler(writeProxy{uc: uc, maxResponse: int64(g.cfg.MaxResponse), hold: g.cfg.HoldBeforeForward})
		}
		h = g.limited(g.allowed(rc.Roles, h))
		if rc.Webhook != nil {
			h = g.signed(rc, h)
		} else {
			h = g.Authenticated(h)
		}
		mux.Handle(rc.Method()+" "+rc.Pattern(), h)
	}
	mux.Handle("/", g.Authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		contract.NewProblem(contract.CodeNotFound, "no route for "+r.Method+" "+r.URL.Path).Write(w)
	})))
	g.routes = mux
	g.shapes = newShapes(g.cfg, mux)
	g.actions = g.actionsHandler(m)
	g.consumers = g.consumersOf(clients)
	return nil
}

// actionsHandler reserves the configured actions, each behind its roles
// and the tenant's request rate; any other name is 404.
func (g *Gateway) actionsHandler(m *httpidem.Middleware) http.Handler {
	// The middleware answers every keyed reservation of an action itself
	// (it hands over the lease or answers as it stands), and an action's
	// key is required: this handler is never reached.
	unreached := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		contract.NewProblem(contract.CodeInternal, "an action's reservation reached no answer").Write(w)
	})
	mux := http.NewServeMux()
	for _, a := range g.cfg.Actions {
		mux.Handle("POST "+contract.ActionsPath+"/"+a.Name, g.limited(g.allowed(a.Roles, m.Handler(unreached))))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		contract.NewProblem(contract.CodeNotFound, "no such action: "+r.Method+" "+r.URL.EscapedPath()).Write(w)
	})
	return mux
}

// Actions reserves the configured actions (POST /_idem/v1/actions/{name},
// docs/design.md "Actions"), behind bearer authentication.
func (g *Gateway) Actions() http.Handler { return g.Authenticated(g.actions) }

func (g *Gateway) writeRoute(rc *config.Route, uc *upstreamClient) (httpidem.Route, error) {
	route := httpidem.Route{Method: rc.Method(), Pattern: rc.Pattern(), RequireKey: rc.RequireKey, KeyFrom: rc.KeyFrom,
		Headers: rc.Fingerprint.Headers, Ignore: rc.Fingerprint.Ignore, IgnoreQuery: rc.Fingerprint.IgnoreQuery,
		Opaque: rc.Body == "opaque", BusinessKey: rc.BusinessKey,
		ConcurrencyKey: rc.ConcurrencyKey, Lease: rc.Lease, Retention: rc.Retention, MaxBody: int64(rc.MaxBody),
		Resend: uc.cfg.HonoursKey, Classify: rc.Outcomes.Classify, Approval: rc.Policy(), ResultRef: rc.ResultRef,
		Probe: routeProbe(rc)}
	if w := rc.Webhook; w != nil {
		// The key comes from signed material, and it is always there; the
		// route's keys are its own (a sender's event ids never meet a
		// client's keys).
		route.KeyFrom, route.RequireKey, route.DigestKey = w.Verifier().KeyFrom(), &always, w.Verifier().DigestKey()
		route.Kind, route.Namespace = ledger.KindWebhook, ledger.WebhookNamespace(rc.Pattern())
	}
	route.Validate = rc.Validator()
	return route, nil
}

// always is a webhook route's require_key.
var always = true

// principalOf is the caller as approvals see it: who requests, who decides.
func principalOf(r *http.Request) (approval.Principal, error) {
	if p, ok := CallerOf(r); ok {
		return p, nil
	}
	return approval.Principal{}, errors.New("no principal")
}

// CallerOf is the principal the gateway's authentication found for r, as
// the approvals and the control plane see it.
func CallerOf(r *http.Request) (approval.Principal, bool) {
	if p := PrincipalFrom(r.Context()); p != nil {
		return approval.Principal{Name: p.Name, Tenant: p.Tenant, Roles: p.Roles}, true
	}
	return approval.Principal{}, false
}

func tenantOf(r *http.Request) (string, error) {
	if p := PrincipalFrom(r.Context()); p != nil {
		return p.Tenant, nil
	}
	return "", errors.New("no principal")
}

// Executor is the keyed executor this configuration's surfaces share:
// its routes, its actions, its consumers, and the MCP proxy's tool
// calls, so that each is kept, counted and limited as any route's.
func (g *Gateway) Executor() *keyed.Executor { return g.x }

// Limited applies the tenant's request rate to h, behind Authenticated.
func (g *Gateway) Limited(h http.Handler) http.Handler { return g.limited(h) }

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

// admit applies the tenant's budgets (live operations, pending approvals,
// held bytes) to a request that would reserve a new operation.
func (g *Gateway) admit(ctx context.Context, tenant string, a keyed.Admission) (func(created, live bool),
	*contract.Problem) {
	settle, ref := g.limits.NewOperation(ctx, tenant, limits.Admission{Bytes: a.Bytes, Approval: a.Approval})
	if ref != nil {
		return nil, refused(ref)
	}
	return settle, nil
}

// Settled hears of an action's operation its owner's step made final
// (the control plane's owner steps): its result counts against the
// tenant's budget of stored bytes, and it no longer counts as live.
func (g *Gateway) Settled(op *ledger.Operation) {
	g.recorded(op)
	g.limits.Ended(op.Tenant)
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

// allowed applies a route's or an action's roles.
func (g *Gateway) allowed(roles []string, next http.Handler) http.Handler {
	if len(roles) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := PrincipalFrom(r.Context())
		if !slices.ContainsFunc(roles, p.HasRole) {
			contract.NewProblem(contract.CodeForbidden, "this needs one of the roles "+fmt.Sprint(roles)).Write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}
