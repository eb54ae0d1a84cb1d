package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/maintain"
	"github.com/idemgate/idemgate/reconcile"
)

// RunBackground runs the maintenance plane until ctx ends (the sweeps,
// the purge, the audit sealer, the reconciler), the metrics counting what
// it expires, and the dashboard's history. Every instance runs it all;
// the stores make that safe. Cancel ctx once the HTTP server has stopped:
// the jobs stop, the audit batcher writes what it holds (Close), and the
// final seal covers it. It returns then: close the store after it.
func (s *Server) RunBackground(ctx context.Context) {
	go s.metrics.History().Run(ctx, 0)
	maintain.Run(ctx, s.store, s.Maintenance())
}

// Maintenance is the maintenance plane's options for this server's
// configuration. Its paces and its sealer are the start's (a reload may
// not change them); its reconciler probes with the running
// configuration's routes.
func (s *Server) Maintenance() maintain.Options {
	cfg := s.cur.Load().cfg
	return maintain.Options{SweepInterval: cfg.SweepInterval, PurgeInterval: cfg.PurgeInterval,
		ShutdownTimeout: cfg.ShutdownTimeout, Logger: s.log, Sealer: cfg.Sealer(s.store, s.log),
		Reconciler: running{s}, OnLeasesExpired: s.metrics.LeasesExpired,
		OnApprovalsExpired: s.metrics.ApprovalsExpired, Flush: s.Close}
}

// Reconciler is the running configuration's reconciler: its routes'
// probes, and each verdict's audit event recorded with the server's other
// events.
func (s *Server) Reconciler() *reconcile.Reconciler { return s.cur.Load().rec }

// record is where a reconciler's audit events go: the batcher, or nowhere
// without an audit section.
func (s *Server) record() func(audit.Event) {
	if s.events != nil {
		return s.events.Record
	}
	return nil
}

// resolved counts an operator's resolution.
func (s *Server) resolved(before, after *ledger.Operation, duplicate bool) {
	s.metrics.Resolved(after.Tenant, after.State, after.UpdatedAt.Sub(before.UpdatedAt), duplicate)
}

// running is the maintenance plane's reconciler: each round probes with
// the reconciler of the configuration running then, so that a route a
// reload adds is reconciled, and one it removes is no longer probed.
type running struct{ s *Server }

// Once implements maintain.Reconciler.
func (r running) Once(ctx context.Context) (int, error) { return r.s.Reconciler().Once(ctx) }

// Probing implements maintain.Reconciler: always, since a reload may add
// a probe (a round without one reads nothing).
func (r running) Probing() bool { return true }

// Run implements maintain.Reconciler, as reconcile.Reconciler.Run does.
func (r running) Run(ctx context.Context, every time.Duration) {
	reconcile.Every(ctx, every, r.Once, func(err error) { r.s.log.Error("reconcile", slog.String("error", err.Error())) })
}
