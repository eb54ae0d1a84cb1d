package control

import (
	"log/slog"
	"net/http"

	"github.com/idemgate/idemgate/ledger"
)

// auditCheckpoint answers GET /audit/checkpoint: the tenant's latest
// signed checkpoint, to anyone of the tenant (a checkpoint is meant to be
// published).
func (a *API) auditCheckpoint(w http.ResponseWriter, r *http.Request, c Caller) {
	cp, err := a.op.Store.LatestCheckpoint(r.Context(), c.Tenant)
	if err != nil {
		fail(w, err, "checkpoint")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(cp.Signed)
}

// auditExport streams the tenant's export (JSON Lines), to an admin. A
// failure once the answer has begun aborts the connection: a client must
// never take a cut export for a whole one (and verify would say so, if it
// did).
func (a *API) auditExport(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := a.op.RequireAdmin(c, "the audit export"); err != nil {
		fail(w, err, "")
		return
	}
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("Content-Disposition", `attachment; filename="audit-`+c.Tenant+`.jsonl"`)
	if _, err := ledger.ExportAudit(r.Context(), a.op.Store, c.Tenant, w); err != nil {
		a.opts.Logger.LogAttrs(r.Context(), slog.LevelError, "audit export", slog.String("tenant", c.Tenant),
			slog.String("error", err.Error()))
		panic(http.ErrAbortHandler)
	}
}
