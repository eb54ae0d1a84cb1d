package control

import (
	"net/http"
	"strconv"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// getOperation answers GET /operations/{id}: the operation whole.
func (a *API) getOperation(w http.ResponseWriter, r *http.Request, c Caller) {
	op, err := a.op.Operation(r.Context(), c, r.PathValue("id"))
	if err != nil {
		fail(w, err, "operation")
		return
	}
	a.writeView(w, r, op)
}

func (a *API) writeView(w http.ResponseWriter, r *http.Request, op *ledger.Operation) {
	v, err := a.op.View(r.Context(), op)
	if err != nil {
		fail(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// listOperations answers GET /operations?key=K[&namespace=N] (that
// operation whole: the key in the clients' namespace unless N names
// another) or ?state=S&after=C&limit=N (a page of the tenant's).
func (a *API) listOperations(w http.ResponseWriter, r *http.Request, c Caller) {
	q := r.URL.Query()
	if key := q.Get("key"); key != "" {
		ns := q.Get("namespace")
		if ns == "" {
			ns = ledger.NamespaceClients
		}
		op, err := a.op.Store.GetByKey(r.Context(), ledger.OpKey{Tenant: c.Tenant, Namespace: ns, Key: key})
		if err != nil {
			fail(w, err, "operation")
			return
		}
		a.writeView(w, r, op)
		return
	}
	p := ledger.ListParams{Tenant: c.Tenant, After: q.Get("after")}
	if s := q.Get("state"); s != "" {
		st, err := ledger.ParseState(s)
		if err != nil {
			contract.NewProblem(contract.CodeInvalidCommand, err.Error()).Write(w)
			return
		}
		p.State = st
	}
	var ok bool
	if p.Limit, ok = limit(w, q.Get("limit")); !ok {
		return
	}
	page, err := a.op.Store.List(r.Context(), p)
	if err != nil {
		fail(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, contract.NewListView(page))
}

// limit reads a page size: a positive number, or none (the store's
// default).
func limit(w http.ResponseWriter, s string) (int, bool) {
	if s == "" {
		return 0, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		contract.NewProblem(contract.CodeInvalidCommand, "limit must be a positive number").Write(w)
		return 0, false
	}
	return n, true
}

// resolve answers POST /operations/{id}/resolve: an admin's resolution of
// an unknown operation (Operator.Resolve), then the operation whole. The
// body may be as large as an answer of MaxResponse, JSON-escaped.
func (a *API) resolve(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := a.op.RequireAdmin(c, "resolving an operation"); err != nil {
		fail(w, err, "")
		return
	}
	var body contract.ResolveRequest
	if err := decodeStrict(w, r, &body, 64<<10+6*a.maxResponse()); err != nil {
		contract.NewProblem(contract.CodeInvalidCommand, "body: "+err.Error()).Write(w)
		return
	}
	op, err := a.op.Resolve(r.Context(), c, Resolution{OperationID: r.PathValue("id"), State: body.State,
		Note: body.Note, Response: body.Response, Result: body.Result, ResultRef: body.ResultRef, Duplicate: body.Duplicate})
	if err != nil {
		fail(w, err, "operation")
		return
	}
	a.writeView(w, r, op)
}

func (a *API) maxResponse() int64 {
	if a.op.MaxResponse > 0 {
		return a.op.MaxResponse
	}
	return contract.DefaultMaxResponse
}

// resolveEffect answers POST /effects/{id}/resolve: an admin's resolution
// of an effect (Operator.ResolveEffect), then the effect's view.
func (a *API) resolveEffect(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := a.op.RequireAdmin(c, "resolving an effect"); err != nil {
		fail(w, err, "")
		return
	}
	var body contract.EffectResolveRequest
	if err := decodeStrict(w, r, &body, 64<<10); err != nil {
		contract.NewProblem(contract.CodeInvalidCommand, "body: "+err.Error()).Write(w)
		return
	}
	e, err := a.op.ResolveEffect(r.Context(), c, EffectResolution{EffectID: r.PathValue("id"), State: body.State,
		Note: body.Note, ResultRef: body.ResultRef})
	if err != nil {
		fail(w, err, "effect")
		return
	}
	writeJSON(w, http.StatusOK, contract.NewEffectViews([]*ledger.Effect{e})[0])
}
