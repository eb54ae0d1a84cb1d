package httpidem

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// maxNote bounds a decision's note, in characters.
const maxNote = 2000

// ApprovalRoutes serves the approvals of the control API on mux under
// prefix (docs/design.md): GET prefix/approvals?status=S&after=C&limit=N, GET
// prefix/approvals/{id}, POST prefix/approvals/{id}/approve and /deny.
// Everything is scoped to the caller's tenant (Options.Principal):
// another tenant's approval is a 404, never a 403. A decision made here
// wakes the requests of this process waiting for it (Prefer: wait).
func (m *Middleware) ApprovalRoutes(mux *http.ServeMux, prefix string) error {
	if m.opts.Principal == nil {
		return errors.New("httpidem: approval routes need Options.Principal")
	}
	mux.HandleFunc("GET "+prefix+"/approvals", m.listApprovals)
	mux.HandleFunc("GET "+prefix+"/approvals/{id}", m.getApproval)
	mux.HandleFunc("POST "+prefix+"/approvals/{id}/approve", m.decide(true))
	mux.HandleFunc("POST "+prefix+"/approvals/{id}/deny", m.decide(false))
	return nil
}

// caller is the authenticated principal of a control request.
func (m *Middleware) caller(w http.ResponseWriter, r *http.Request) (approval.Principal, bool) {
	p, err := m.opts.Principal(r)
	if err != nil || p.Tenant == "" {
		contract.NewProblem(contract.CodeUnauthorized, "no principal").Write(w)
		return p, false
	}
	return p, true
}

func (m *Middleware) getApproval(w http.ResponseWriter, r *http.Request) {
	p, ok := m.caller(w, r)
	if !ok {
		return
	}
	a, err := m.opts.Store.GetApproval(r.Context(), r.PathValue("id"))
	if err == nil && a.Tenant != p.Tenant {
		err = ledger.ErrNotFound
	}
	if err != nil {
		approvalProblem(err).Write(w)
		return
	}
	WriteJSON(w, http.StatusOK, contract.NewApprovalView(a))
}

func (m *Middleware) listApprovals(w http.ResponseWriter, r *http.Request) {
	p, ok := m.caller(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	lp := ledger.ApprovalListParams{Tenant: p.Tenant, After: q.Get("after")}
	if s := q.Get("status"); s != "" {
		st, err := ledger.ParseApprovalStatus(s)
		if err != nil {
			contract.NewProblem(contract.CodeInvalidCommand, err.Error()).Write(w)
			return
		}
		lp.Status = st
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			contract.NewProblem(contract.CodeInvalidCommand, "limit must be a positive number").Write(w)
			return
		}
		lp.Limit = n
	}
	page, err := m.opts.Store.ListApprovals(r.Context(), lp)
	if err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	WriteJSON(w, http.StatusOK, contract.NewApprovalListView(page))
}

// decide approves or denies an approval on the caller's word.
func (m *Middleware) decide(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := m.caller(w, r)
		if !ok {
			return
		}
		var body contract.Decision
		if err := decodeStrict(w, r, &body); err != nil {
			contract.NewProblem(contract.CodeInvalidCommand, "body: "+err.Error()).Write(w)
			return
		}
		if utf8.RuneCountInString(body.Note) > maxNote {
			contract.NewProblem(contract.CodeInvalidCommand, "note: at most 2000 characters").Write(w)
			return
		}
		d := ledger.DecisionParams{ApprovalID: r.PathValue("id"), Tenant: p.Tenant, Fingerprint: body.Fingerprint,
			Actor: p.Name, Roles: p.Roles, Note: body.Note}
		decide := m.opts.Store.Approve
		if !approve {
			decide = m.opts.Store.Deny
		}
		a, err := decide(r.Context(), d)
		if err != nil {
			approvalProblem(err).Write(w)
			return
		}
		m.waiters.signal(a.OpID)
		WriteJSON(w, http.StatusOK, contract.NewApprovalView(a))
	}
}

// approvalProblem is contract.ProblemFor, with "no such approval" for a miss.
func approvalProblem(err error) *contract.Problem {
	if errors.Is(err, ledger.ErrNotFound) {
		return contract.NewProblem(contract.CodeNotFound, "no such approval")
	}
	return contract.ProblemFor(err)
}

// decodeStrict reads a small JSON body into v, refusing unknown members
// and trailing data.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// WriteJSON answers v as JSON, never cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Changed tells the requests waiting on an operation (Prefer: wait) that
// it changed elsewhere: decided or resolved on the web page, say.
func (m *Middleware) Changed(opID string) { m.waiters.signal(opID) }
