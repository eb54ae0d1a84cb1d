package server

import (
	"context"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/gateway"
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
// configuration.
func (s *Server) Maintenance() maintain.Options {
	return maintain.Options{SweepInterval: s.cfg.SweepInterval, PurgeInterval: s.cfg.PurgeInterval,
		ShutdownTimeout: s.cfg.ShutdownTimeout, Logger: s.log, Sealer: s.cfg.Sealer(s.store, s.log),
		Reconciler: s.Reconciler(), OnLeasesExpired: s.metrics.LeasesExpired,
		OnApprovalsExpired: s.metrics.ApprovalsExpired, Flush: s.Close}
}

// Reconciler is the server's reconciler: its routes' probes, and each
// verdict's audit event recorded with the server's other events.
func (s *Server) Reconciler() *reconcile.Reconciler {
	var record func(audit.Event)
	if s.events != nil {
		record = s.events.Record
	}
	return gateway.NewReconciler(s.cfg, s.store, record, s.log)
}
