package webui

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// operationData is an operation's page.
type operationData struct {
	Row      row
	Approval *approvalItem // its current approval, whole; nil when none
	History  []ledger.Event
	Effects  []*ledger.Effect // in their order
	Timeline []moment
	// Checkpoint is the size of the tenant's latest signed checkpoint (0
	// before the first); ProofError says why proofs could not be read.
	Checkpoint int64
	ProofError string
	CanResolve bool
	Resolvable bool // the operation is unknown: only then can it be resolved
}

// moment is one audit event on the timeline, with its proof's status.
type moment struct {
	E       audit.Event
	Proven  bool
	Pending string // why there is no proof yet
}

// operationOf reads an operation of the session's tenant; another
// tenant's is not found (never "forbidden": its existence stays unsaid).
func (u *UI) operationOf(r *http.Request, s *session) (*ledger.Operation, error) {
	op, err := u.opts.Store.Get(r.Context(), r.PathValue("id"))
	if err == nil && op.Tenant != s.principal.Tenant {
		return nil, ledger.ErrNotFound
	}
	return op, err
}

// operationPage shows an operation, its approval, its history, and its
// audit events as a timeline with each one's inclusion proof status.
func (u *UI) operationPage(w http.ResponseWriter, r *http.Request, s *session) {
	op, err := u.operationOf(r, s)
	if err != nil {
		u.storeFail(w, r, s, err, "operations")
		return
	}
	data := operationData{Row: u.rowOf(op, u.opts.Now()), CanResolve: u.isAdmin(s.principal),
		Resolvable: op.State == ledger.Unknown}
	if data.History, err = u.opts.Store.History(r.Context(), op.ID); err != nil {
		u.storeFail(w, r, s, err, "operations")
		return
	}
	if data.Effects, err = u.opts.Store.Effects(r.Context(), op.Tenant, op.Key); err != nil {
		u.storeFail(w, r, s, err, "operations")
		return
	}
	if op.Approval != nil {
		a, err := u.opts.Store.GetApproval(r.Context(), op.Approval.ID)
		if err != nil {
			u.storeFail(w, r, s, err, "operations")
			return
		}
		it := u.item(a, s.principal)
		data.Approval = &it
	}
	u.timeline(r, op, &data)
	pg := u.page(s, "operations", "Operation "+op.ID, data)
	if r.URL.Query().Has("resolved") {
		pg.Notice = "Resolved. Retries with the same key now get this outcome."
	}
	u.render(w, r, http.StatusOK, "operation", pg)
}

// timeline reads the operation's audit events with their proofs. A proof
// that cannot be read does not hide the operation: the page says why.
func (u *UI) timeline(r *http.Request, op *ledger.Operation, data *operationData) {
	if c, err := u.opts.Store.LatestCheckpoint(r.Context(), op.Tenant); err == nil {
		data.Checkpoint = c.Size
	}
	proofs, err := ledger.ProveAudit(r.Context(), u.opts.Store, op.ID)
	if errors.Is(err, ledger.ErrNotFound) {
		return // no event recorded yet
	}
	if err != nil {
		u.opts.Logger.Error("ui audit proofs", slog.String("operation_id", op.ID), slog.String("error", err.Error()))
		data.ProofError = "The audit proofs could not be read: " + err.Error()
		return
	}
	for _, p := range proofs {
		data.Timeline = append(data.Timeline, moment{E: p.Event, Proven: len(p.Text) > 0, Pending: p.Pending})
	}
}

// resolution is an admin's posted resolution.
type resolution struct {
	params ledger.ResolveParams
	// duplicate: the admin found the effect made twice despite the checks
	// (the metric that matters most); the note says so, as on the control
	// API.
	duplicate bool
	bad       string
}

// readResolution reads the resolve form: the state, a note, and
// optionally the upstream's answer (status, content type, body) and its
// reference for the effect.
func readResolution(r *http.Request, id, actor string, maxResponse int64) resolution {
	p := ledger.ResolveParams{ID: id, Actor: actor, Note: strings.TrimSpace(r.PostFormValue("note")),
		ResultRef: strings.TrimSpace(r.PostFormValue("result_ref"))}
	to, err := ledger.ParseState(r.PostFormValue("state"))
	switch {
	case err != nil || (to != ledger.Succeeded && to != ledger.Failed && to != ledger.Prepared):
		return resolution{bad: "Choose succeeded, failed or prepared (not applied)."}
	case p.Note == "":
		return resolution{bad: "A resolution needs a note: it is audited."}
	case utf8.RuneCountInString(p.Note) > maxNote:
		return resolution{bad: "The note is longer than 2000 characters."}
	}
	p.To = to
	dup := r.PostFormValue("duplicate") == "1"
	if dup {
		p.Note = "duplicate: " + p.Note
	}
	status := strings.TrimSpace(r.PostFormValue("status"))
	if status == "" {
		return resolution{params: p, duplicate: dup}
	}
	code, err := strconv.Atoi(status)
	switch {
	case err != nil:
		return resolution{bad: "The upstream's status must be a number from 200 to 599."}
	case !to.Final():
		return resolution{bad: "An answer goes only with succeeded or failed: prepared means nothing was applied."}
	}
	a := contract.Answer{Status: code, Body: r.PostFormValue("body")}
	if ct := strings.TrimSpace(r.PostFormValue("content_type")); ct != "" {
		a.Headers = map[string][]string{"Content-Type": {ct}}
	}
	if p.Response, err = a.Response(maxResponse); err != nil {
		return resolution{bad: "The upstream's answer is refused: " + err.Error() + "."}
	}
	return resolution{params: p, duplicate: dup}
}

// resolve settles an unknown operation on an admin's word, through the
// store's Resolve, as the control API does.
func (u *UI) resolve(w http.ResponseWriter, r *http.Request, s *session) {
	op, err := u.operationOf(r, s)
	if err != nil {
		u.storeFail(w, r, s, err, "operations")
		return
	}
	back := "operations/" + op.ID
	if !u.isAdmin(s.principal) {
		u.failBack(w, r, s, http.StatusForbidden, &problemView{Title: "Not allowed",
			Detail: "Resolving an operation needs the " + u.opts.AdminRole + " role.", Back: back})
		return
	}
	res := readResolution(r, op.ID, s.principal.Name, u.opts.MaxResponse)
	if res.bad != "" {
		u.failBack(w, r, s, http.StatusBadRequest, &problemView{Title: "Not accepted", Detail: res.bad, Back: back})
		return
	}
	done, err := u.opts.Store.Resolve(r.Context(), res.params)
	if err != nil {
		u.storeFail(w, r, s, err, back)
		return
	}
	u.opts.Logger.Info("ui resolve", slog.String("operation_id", op.ID), slog.String("principal", s.principal.Name),
		slog.String("to", string(done.State)))
	if u.opts.Resolved != nil {
		u.opts.Resolved(op, done, res.duplicate)
	}
	u.redirect(w, r, back+"?resolved")
}
