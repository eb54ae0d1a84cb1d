package gateway

import (
	"context"
	"net/http"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/ledger"
)

// auditRoutes serves the audit log of the caller's tenant: its latest
// signed checkpoint, to anyone of the tenant (a checkpoint is meant to be
// published), and its export, to an admin.
func (g *Gateway) auditRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+ControlPrefix+"/audit/checkpoint", g.auditCheckpoint)
	mux.HandleFunc("GET "+ControlPrefix+"/audit/export", g.auditExport)
}

func (g *Gateway) auditCheckpoint(w http.ResponseWriter, r *http.Request) {
	c, err := g.store.LatestCheckpoint(r.Context(), PrincipalFrom(r.Context()).Tenant)
	if err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(c.Signed)
}

// auditExport streams the tenant's export. A failure once the answer has
// begun aborts the connection: a client must never take a cut export for
// a whole one (and verify would say so, if it did).
func (g *Gateway) auditExport(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	if !p.HasRole("admin") {
		contract.NewProblem(contract.CodeForbidden, "the audit export needs the admin role").Write(w)
		return
	}
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("Content-Disposition", `attachment; filename="audit-`+p.Tenant+`.jsonl"`)
	if _, err := ledger.ExportAudit(r.Context(), g.store, p.Tenant, w); err != nil {
		g.log.Error("audit export", "tenant", p.Tenant, "error", err.Error())
		panic(http.ErrAbortHandler)
	}
}

// sealer is the gateway's audit sealer, nil without an audit section.
func (g *Gateway) sealer() *audit.Sealer {
	a := g.cfg.Audit
	if a == nil {
		return nil
	}
	return &audit.Sealer{Log: g.store, Signing: a.Signing(), File: a.CheckpointsFile, Logger: g.log}
}

// runSealer seals the audit log until ctx ends, then once more, so that a
// gateway stopped gracefully leaves its events sealed and signed.
func (g *Gateway) runSealer(ctx context.Context) {
	s := g.sealer()
	if s == nil {
		return
	}
	s.Run(ctx)
	fin, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout)
	defer cancel()
	for {
		if n, err := s.Round(fin); err != nil || n == 0 {
			return
		}
	}
}

// recorder is where the middleware records the events that are no
// transition: the batcher, or none (a nil interface, not a nil pointer).
func (g *Gateway) recorder() httpidem.Recorder {
	if g.events == nil {
		return nil
	}
	return g.events
}
