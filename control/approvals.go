package control

import (
	"net/http"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// getApproval answers GET /approvals/{id}: the whole record.
func (a *API) getApproval(w http.ResponseWriter, r *http.Request, c Caller) {
	ap, err := a.op.Approval(r.Context(), c, r.PathValue("id"))
	if err != nil {
		fail(w, err, "approval")
		return
	}
	writeJSON(w, http.StatusOK, contract.NewApprovalView(ap))
}

// listApprovals answers GET /approvals?status=S&after=C&limit=N.
func (a *API) listApprovals(w http.ResponseWriter, r *http.Request, c Caller) {
	q := r.URL.Query()
	p := ledger.ApprovalListParams{Tenant: c.Tenant, After: q.Get("after")}
	if s := q.Get("status"); s != "" {
		st, err := ledger.ParseApprovalStatus(s)
		if err != nil {
			contract.NewProblem(contract.CodeInvalidCommand, err.Error()).Write(w)
			return
		}
		p.Status = st
	}
	var ok bool
	if p.Limit, ok = limit(w, q.Get("limit")); !ok {
		return
	}
	page, err := a.op.Store.ListApprovals(r.Context(), p)
	if err != nil {
		fail(w, err, "")
		return
	}
	writeJSON(w, http.StatusOK, contract.NewApprovalListView(page))
}

// decide answers POST /approvals/{id}/approve and …/deny with
// contract.Decision: the decision on the caller's word (Operator.Decide).
func (a *API) decide(approve bool) handler {
	return func(w http.ResponseWriter, r *http.Request, c Caller) {
		var body contract.Decision
		if err := decodeStrict(w, r, &body, 64<<10); err != nil {
			contract.NewProblem(contract.CodeInvalidCommand, "body: "+err.Error()).Write(w)
			return
		}
		ap, err := a.op.Decide(r.Context(), c, Decision{ApprovalID: r.PathValue("id"), Approve: approve,
			Fingerprint: body.Fingerprint, Note: body.Note})
		if err != nil {
			fail(w, err, "approval")
			return
		}
		writeJSON(w, http.StatusOK, contract.NewApprovalView(ap))
	}
}
