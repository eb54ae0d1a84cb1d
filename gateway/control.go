package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/ledger"
)

// control serves the control API (docs/design.md): operations by id, by key, by
// state, their resolution by an admin, and approvals (httpidem's). Everything is scoped to the
// caller's tenant: another tenant's operation is a 404, never a 403, so its
// existence is not revealed.
func (g *Gateway) control(m *httpidem.Middleware) (http.Handler, error) {
	mux := http.NewServeMux()
	if err := m.ApprovalRoutes(mux, ControlPrefix); err != nil {
		return nil, err
	}
	mux.HandleFunc("GET "+ControlPrefix+"/operations/{id}", g.getOperation)
	mux.HandleFunc("GET "+ControlPrefix+"/operations", g.listOperations)
	mux.HandleFunc("POST "+ControlPrefix+"/operations/{id}/resolve", g.resolve)
	g.auditRoutes(mux)
	mux.HandleFunc(ControlPrefix+"/", func(w http.ResponseWriter, r *http.Request) {
		contract.NewProblem(contract.CodeNotFound, "no such control resource").Write(w)
	})
	return mux, nil
}

// operation reads an operation of the caller's tenant.
func (g *Gateway) operation(r *http.Request, id string) (*ledger.Operation, error) {
	op, err := g.store.Get(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if op.Tenant != PrincipalFrom(r.Context()).Tenant {
		return nil, ledger.ErrNotFound
	}
	return op, nil
}

func (g *Gateway) getOperation(w http.ResponseWriter, r *http.Request) {
	op, err := g.operation(r, r.PathValue("id"))
	if err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	g.writeView(w, r, op)
}

func (g *Gateway) writeView(w http.ResponseWriter, r *http.Request, op *ledger.Operation) {
	history, err := g.store.History(r.Context(), op.ID)
	if err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	effects, err := g.store.Effects(r.Context(), op.Tenant, op.Key)
	if err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	view := contract.NewView(op, history).WithEffects(effects)
	if op.Approval != nil {
		a, err := g.store.GetApproval(r.Context(), op.Approval.ID)
		if err != nil {
			contract.ProblemFor(err).Write(w)
			return
		}
		view = view.WithApproval(a)
	}
	httpidem.WriteJSON(w, http.StatusOK, view)
}

func (g *Gateway) listOperations(w http.ResponseWriter, r *http.Request) {
	q, tenant := r.URL.Query(), PrincipalFrom(r.Context()).Tenant
	if key := q.Get("key"); key != "" {
		op, err := g.store.GetByKey(r.Context(), tenant, key)
		if err != nil {
			contract.ProblemFor(err).Write(w)
			return
		}
		g.writeView(w, r, op)
		return
	}
	p := ledger.ListParams{Tenant: tenant, After: q.Get("after")}
	if s := q.Get("state"); s != "" {
		st, err := ledger.ParseState(s)
		if err != nil {
			contract.NewProblem(contract.CodeInvalidCommand, err.Error()).Write(w)
			return
		}
		p.State = st
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			contract.NewProblem(contract.CodeInvalidCommand, "limit must be a positive number").Write(w)
			return
		}
		p.Limit = n
	}
	page, err := g.store.List(r.Context(), p)
	if err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	httpidem.WriteJSON(w, http.StatusOK, contract.NewListView(page))
}

// resolveRequest is the body of POST …/resolve.
type resolveRequest struct {
	State string `json:"state"`
	Note  string `json:"note"`
	// Response is the upstream's answer, when the operator found it
	// (headers: name → array of values; body: text): retries replay it.
	Response *contract.Answer `json:"response"`
	// ResultRef is the upstream's reference for the effect, when the
	// operator found it; Duplicate says the effect was made twice despite
	// the checks (the metric that matters most).
	ResultRef string `json:"result_ref"`
	Duplicate bool   `json:"duplicate"`
}

// resolve settles an unknown operation on an admin's word, recorded in its
// history with the admin's name and note, and, when given, the upstream's
// answer that retries then replay. A refused request changes nothing.
func (g *Gateway) resolve(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	if !p.HasRole("admin") {
		contract.NewProblem(contract.CodeForbidden, "resolving an operation needs the admin role").Write(w)
		return
	}
	op, err := g.operation(r, r.PathValue("id"))
	if err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	params, duplicate, problem := g.readResolve(w, r, op.ID, p.Name)
	if problem != nil {
		problem.Write(w)
		return
	}
	resolved, err := g.store.Resolve(r.Context(), params)
	if errors.Is(err, ledger.ErrIllegalTransition) {
		if now, err := g.store.Get(r.Context(), op.ID); err == nil {
			op = now // the state that refused, not the one read before
		}
		contract.NewProblem(contract.CodeIllegalTransition, "only an unknown operation can be resolved").
			For(op, ControlPrefix).Write(w)
		return
	}
	if err != nil {
		contract.ProblemFor(err).Write(w) // the ledger's refusals are 422 invalid_command
		return
	}
	g.metrics.Resolved(p.Tenant, params.To, resolved.UpdatedAt.Sub(op.UpdatedAt), duplicate)
	g.writeView(w, r, resolved)
}

// readResolve reads and checks a resolution of operation id by actor, and
// whether the admin found the effect made twice. The request may be as
// large as an answer of max_response, JSON-escaped.
func (g *Gateway) readResolve(w http.ResponseWriter, r *http.Request, id, actor string) (ledger.ResolveParams,
	bool, *contract.Problem) {
	var body resolveRequest
	max := int64(g.cfg.MaxResponse)
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10+6*max))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return ledger.ResolveParams{}, false, contract.NewProblem(contract.CodeInvalidCommand, "body: "+err.Error())
	}
	to, err := ledger.ParseState(body.State)
	if err != nil || (to != ledger.Succeeded && to != ledger.Failed && to != ledger.Prepared) {
		return ledger.ResolveParams{}, false, contract.NewProblem(contract.CodeInvalidCommand,
			`state must be "succeeded", "failed" or "prepared"`)
	}
	params := ledger.ResolveParams{ID: id, To: to, Actor: actor, Note: body.Note, ResultRef: body.ResultRef}
	if body.Duplicate && params.Note != "" {
		params.Note = "duplicate: " + params.Note // the audit log keeps the operator's finding
	}
	if body.Response != nil {
		if params.Response, err = body.Response.Response(max); err != nil {
			return params, false, contract.NewProblem(contract.CodeInvalidCommand, "response: "+err.Error())
		}
	}
	return params, body.Duplicate, nil
}
