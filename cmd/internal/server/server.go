// Package server is the composition root of `idemgate serve` (docs/design.md,
// "Layout": only cmd/ wires). Given a configuration and its migrated store,
// it builds each plane from its own package and mounts them on one
// listener: the gateway's routes (the data plane, package gateway over
// httpidem), the control API (package control, behind the gateway's
// bearer authentication), the web page (package webui, with its own
// sessions), the metrics, and the health probes. RunBackground runs the
// maintenance plane (package maintain) with the gateway's sealer and
// reconciler. cmd/idemgate and cmd/bench build their servers here, so
// that the suite in this package tests the server as it runs.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/limits"
	"github.com/idemgate/idemgate/mcpproxy"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/tracing"
	"github.com/idemgate/idemgate/webui"
)

// Server is the gateway and the planes beside it, serving one
// configuration at a time. What holds state across reloads lives here:
// the store, the metrics, the limiter (its buckets, budgets and failed
// tokens) and the audit batcher. What a configuration decides lives in
// its snapshot, built whole and swapped atomically by Reload.
type Server struct {
	store   ledger.Store
	log     *slog.Logger
	metrics *metrics.Metrics
	limits  *limits.Limiter
	events  *ledger.EventBatcher // nil without an audit section
	tracing *tracing.Tracing     // nil: off, nothing wrapped
	// rechecks reach the running consumers: a reload has each one look at
	// its dead letter again.
	rechecks rechecks
	// mcp is the MCP proxy (nil without mcp_servers), built at start: it
	// holds its upstreams' processes and sessions, so mcp_servers need a
	// restart; each snapshot authenticates its callers.
	mcp *mcpproxy.Proxy
	cur atomic.Pointer[snapshot]
	// clock, if set, is every configuration's Clock (WithClock).
	clock func() time.Time
	// sessions are the web page's: each snapshot's page shares them, and
	// a reload ends only those of the principals it changed.
	sessions *webui.Sessions
	// reloading serialises reloads: two at once would build from the
	// same running configuration, and the last to swap would win.
	reloading sync.Mutex
}

// Option is a setting of the server that no configuration file holds.
type Option func(*Server)

// WithTracing traces the server's requests, their ledger steps and their
// upstream calls (package tracing); nil, or no option, traces nothing.
func WithTracing(t *tracing.Tracing) Option { return func(s *Server) { s.tracing = t } }

// WithClock makes now the time the configuration's JWT and TLS checks
// read (config.Config.Clock), the first configuration's and every
// reloaded one's: tests move it instead of sleeping past a second, a
// min_refresh or a max_age.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.clock = now } }

// New builds the server. The store must be migrated; it is the caller's
// to close, after Close.
func New(cfg *config.Config, store ledger.Store, log *slog.Logger, opts ...Option) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{store: store, log: log, sessions: webui.NewSessions(),
		metrics: metrics.New(metrics.Options{Store: store, Tenants: cfg.KnownTenants(), Consumers: consumers(cfg),
			MCP: len(cfg.MCPServers) > 0})}
	for _, o := range opts {
		o(s)
	}
	if s.clock != nil {
		cfg.Clock = s.clock
	}
	cfg.ObserveTLS(log, s.metrics.TLSReloaded) // the listeners' TLS is the first configuration's
	if cfg.Audit != nil {
		s.events = ledger.NewEventBatcher(store, 0, log)
	}
	s.limits = limits.New(limits.Options{Usage: store.Usage, Policy: cfg.Policy, Resync: cfg.Limits.UsageInterval,
		OnError: func(tenant string, err error) {
			s.log.Error("read usage", slog.String("tenant", tenant), slog.String("error", err.Error()))
		}})
	snap, err := s.build(cfg)
	if err != nil {
		s.Close() // the MCP proxy's upstreams, if it started them
		return nil, err
	}
	s.cur.Store(snap)
	return s, nil
}

// deps are the gateway's collaborators: the metrics observe its requests,
// the batcher records its events that are no transition, the limiter
// reads each tenant's usage from the store.
func (s *Server) deps(cfg *config.Config) gateway.Deps {
	d := gateway.Deps{Store: s.tracing.Store(s.store), Logger: s.log, Limits: s.limits}
	if s.tracing != nil {
		d.Transport = s.tracing.Transport
	}
	var m keyed.Observer
	if !cfg.Unobserved {
		m = s.metrics // a nil interface otherwise, not a nil pointer
	}
	d.Observer = tracing.Observers(m, s.tracing.Observer())
	if s.events != nil {
		d.Audit = s.events
	}
	return d
}

// mount serves every plane of a snapshot on one mux, behind the gateway's
// front (header hygiene, a log line per request).
func (s *Server) mount(sn *snapshot) (http.Handler, error) {
	api, err := control.New(control.Options{Operator: sn.op, Caller: gateway.CallerOf, Logger: s.log,
		Reload: s.reloadAsked})
	if err != nil {
		return nil, err
	}
	page, err := s.ui(sn)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.ready)
	if sn.cfg.MetricsListen == "" {
		mux.Handle("GET /metrics", sn.gw.Authenticated(sn.scrapers(s.metrics.Handler())))
	}
	mux.Handle(contract.ControlPrefix+"/", sn.gw.Authenticated(api))
	mux.Handle("POST "+contract.ActionsPath+"/", sn.gw.Actions()) // the data plane: reserving is a keyed write
	mux.Handle(UIPrefix, page)                                    // its own sessions: no bearer token in a browser
	mux.Handle("GET /favicon.ico", page.Icon())                   // asked for by a browser on any page, signed in or not
	s.mountMCP(sn, mux)
	mux.Handle("/", sn.gw.Routes())
	return sn.gw.Front(mux), nil
}

// MetricsRole is the role, besides the admin role, that may read /metrics
// on the main listener.
const MetricsRole = "metrics"

// scrapers serves h to a principal holding the metrics or the admin role,
// and refuses any other with 403: the metrics name every tenant and route
// of the gateway, which no tenant's agent needs to learn. A scraper that
// holds no token reads metrics_listen, meant for a private network.
func (sn *snapshot) scrapers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := gateway.CallerOf(r)
		if !slices.Contains(p.Roles, MetricsRole) && !sn.op.IsAdmin(control.Of(p)) {
			contract.NewProblem(contract.CodeForbidden, "/metrics needs the role "+MetricsRole+" or the admin "+
				"role; metrics_listen serves it without a token").Write(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// action is a configured action's settings for the owner steps.
func (sn *snapshot) action(name string) (control.Action, bool) {
	a := sn.cfg.Action(name)
	if a == nil {
		return control.Action{}, false
	}
	return control.Action{Lease: a.Lease, MaxResult: int64(a.MaxResult)}, true
}

// ready answers /readyz: 503 while the store cannot do its work.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Handler is the server's whole HTTP surface: each request is served
// whole by the configuration running when it arrived (a reload swaps it
// for the requests that follow).
func (s *Server) Handler() http.Handler {
	return s.tracing.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.cur.Load().handler.ServeHTTP(w, r)
	}))
}

// HTTPServer is the http.Server of the whole surface, with the
// configuration's limits on slow clients and connections (settings a
// reload may not change).
func (s *Server) HTTPServer() *gateway.Server { return s.cur.Load().gw.NewServer(s.Handler()) }

// Metrics is the server's metrics: its /metrics handler (served apart
// when metrics_listen is set), and the dashboard's history.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// Close writes the audit events still queued and stops the batcher; a
// second call does nothing. RunBackground calls it at its stop, before
// the final seal; without RunBackground, call it once the HTTP server
// has stopped, before the store closes.
func (s *Server) Close() {
	if s.mcp != nil {
		s.mcp.Close()
	}
	if s.events != nil {
		s.events.Close()
	}
}
