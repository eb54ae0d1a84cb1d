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
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/limits"
	"github.com/idemgate/idemgate/mcpproxy"
	"github.com/idemgate/idemgate/metrics"
)

// Server is one configuration's gateway and the planes beside it.
type Server struct {
	cfg     *gateway.Config
	store   ledger.Store
	log     *slog.Logger
	gw      *gateway.Gateway
	op      *control.Operator
	metrics *metrics.Metrics
	limits  *limits.Limiter
	events  *ledger.EventBatcher // nil without an audit section
	mcp     *mcpproxy.Proxy      // nil without mcp_servers
	handler http.Handler
}

// New builds the server. The store must be migrated; it is the caller's
// to close, after Close.
func New(cfg *gateway.Config, store ledger.Store, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, store: store, log: log,
		metrics: metrics.New(metrics.Options{Store: store, Tenants: tenants(cfg)})}
	if cfg.Audit != nil {
		s.events = ledger.NewEventBatcher(store, 0, log)
	}
	gw, err := gateway.New(cfg, s.deps())
	if err != nil {
		return nil, err
	}
	s.gw = gw
	s.op = &control.Operator{Store: store, MaxResponse: int64(cfg.MaxResponse), Wake: gw.Changed,
		Resolved: func(before, after *ledger.Operation, duplicate bool) {
			s.metrics.Resolved(after.Tenant, after.State, after.UpdatedAt.Sub(before.UpdatedAt), duplicate)
		}, Actions: s.action, Settled: gw.Settled}
	if s.mcp, err = s.mcpProxy(); err != nil {
		return nil, err
	}
	if s.handler, err = s.mount(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// tenants are the tenants of the configuration's principals: the only
// ones that can make operations, so the metrics' series start with them.
func tenants(cfg *gateway.Config) []string {
	out := make([]string, 0, len(cfg.Principals))
	for _, p := range cfg.Principals {
		out = append(out, p.Tenant)
	}
	return out
}

// deps are the gateway's collaborators: the metrics observe its requests,
// the batcher records its events that are no transition, the limiter
// reads each tenant's usage from the store.
func (s *Server) deps() gateway.Deps {
	s.limits = limits.New(limits.Options{Usage: s.store.Usage, Policy: s.cfg.Policy, Resync: s.cfg.Limits.UsageInterval,
		OnError: func(tenant string, err error) {
			s.log.Error("read usage", slog.String("tenant", tenant), slog.String("error", err.Error()))
		}})
	d := gateway.Deps{Store: s.store, Logger: s.log, Limits: s.limits}
	if !s.cfg.Unobserved {
		d.Observer = s.metrics // a nil interface otherwise, not a nil pointer
	}
	if s.events != nil {
		d.Audit = s.events
	}
	return d
}

// mount serves every plane on one mux, behind the gateway's front (header
// hygiene, a log line per request).
func (s *Server) mount() (http.Handler, error) {
	api, err := control.New(control.Options{Operator: s.op, Caller: gateway.CallerOf, Logger: s.log})
	if err != nil {
		return nil, err
	}
	page, err := s.ui()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.ready)
	if s.cfg.MetricsListen == "" {
		mux.Handle("GET /metrics", s.gw.Authenticated(s.scrapers(s.metrics.Handler())))
	}
	mux.Handle(contract.ControlPrefix+"/", s.gw.Authenticated(api))
	mux.Handle("POST "+contract.ActionsPath+"/", s.gw.Actions()) // the data plane: reserving is a keyed write
	mux.Handle(UIPrefix, page)                                   // its own sessions: no bearer token in a browser
	mux.Handle("GET /favicon.ico", page.Icon())                  // asked for by a browser on any page, signed in or not
	s.mountMCP(mux)
	mux.Handle("/", s.gw.Routes())
	return s.gw.Front(mux), nil
}

// MetricsRole is the role, besides the admin role, that may read /metrics
// on the main listener.
const MetricsRole = "metrics"

// scrapers serves h to a principal holding the metrics or the admin role,
// and refuses any other with 403: the metrics name every tenant and route
// of the gateway, which no tenant's agent needs to learn. A scraper that
// holds no token reads metrics_listen, meant for a private network.
func (s *Server) scrapers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := gateway.CallerOf(r)
		if !slices.Contains(p.Roles, MetricsRole) && !s.op.IsAdmin(control.Of(p)) {
			contract.NewProblem(contract.CodeForbidden, "/metrics needs the role "+MetricsRole+" or the admin "+
				"role; metrics_listen serves it without a token").Write(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// action is a configured action's settings for the owner steps.
func (s *Server) action(name string) (control.Action, bool) {
	a := s.cfg.Action(name)
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

// Handler is the server's whole HTTP surface.
func (s *Server) Handler() http.Handler { return s.handler }

// HTTPServer is the http.Server of the whole surface, with the
// configuration's limits on slow clients and connections.
func (s *Server) HTTPServer() *gateway.Server { return s.gw.NewServer(s.handler) }

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
