package webui

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
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
	// Action marks an action's operation (docs/design.md, "Actions"): its
	// resolution takes a result, not the upstream's answer.
	Action bool
	// Sent is what is known of the request an unknown operation sent, for
	// the person who looks for its record at the upstream; nil otherwise.
	Sent *sent
	// AskedRun is the run of the request that reserved the operation,
	// from its first event; the operation keeps only the latest sender's
	// (the run that executed it, after an approval).
	AskedRun string
}

// moment is one audit event on the timeline, with its proof's status,
// and what it says in words.
type moment struct {
	E       audit.Event
	Proven  bool
	Pending string // why there is no proof yet
	Title   string // the kind in words
	Say     []part
}

// operationOf reads an operation of the session's tenant; another
// tenant's is not found (never "forbidden": its existence stays unsaid),
// as on the control API (the Operator's read).
func (u *UI) operationOf(r *http.Request, s *session) (*ledger.Operation, error) {
	return u.opts.Operator.Operation(r.Context(), control.Of(s.principal), r.PathValue("id"))
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
	_, data.Action = contract.ActionName(op)
	if data.History, err = u.opts.Store.History(r.Context(), op.ID); err != nil {
		u.storeFail(w, r, s, err, "operations")
		return
	}
	if data.Effects, err = u.opts.Store.Effects(r.Context(), op.OpKey()); err != nil {
		u.storeFail(w, r, s, err, "operations")
		return
	}
	if op.Approval != nil {
		a, err := u.opts.Operator.Store.GetApproval(r.Context(), op.Approval.ID)
		if err != nil {
			u.storeFail(w, r, s, err, "operations")
			return
		}
		it := u.item(a, s.principal)
		data.Approval = &it
	}
	if op.State == ledger.Unknown {
		data.Sent = sentOf(op)
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
		e := p.Event
		data.Timeline = append(data.Timeline, moment{E: e, Proven: len(p.Text) > 0, Pending: p.Pending,
			Title: kindTitle(e.Kind), Say: say(e)})
		if e.From == "" && e.To != "" && data.AskedRun == "" {
			data.AskedRun = e.RunID
		}
	}
}

// readResolution reads the resolve form: the state, a note, and
// optionally the upstream's answer (status, content type, body), or an
// action's result, and the reference for the effect. The Operator checks the rest, as it checks
// the control API's.
func readResolution(r *http.Request, id string) (control.Resolution, error) {
	res := control.Resolution{OperationID: id, State: r.PostFormValue("state"),
		Note: strings.TrimSpace(r.PostFormValue("note")), ResultRef: strings.TrimSpace(r.PostFormValue("result_ref")),
		Duplicate: r.PostFormValue("duplicate") == "1"}
	if result := strings.TrimSpace(r.PostFormValue("result")); result != "" {
		res.Result = json.RawMessage(result) // an action's; the Operator checks it is JSON
	}
	status := strings.TrimSpace(r.PostFormValue("status"))
	if status == "" {
		return res, nil
	}
	code, err := strconv.Atoi(status)
	if err != nil {
		return res, contract.NewProblem(contract.CodeInvalidCommand, "The upstream's status must be a number from 200 to 599.")
	}
	res.Response = &contract.Answer{Status: code, Body: r.PostFormValue("body")}
	if ct := strings.TrimSpace(r.PostFormValue("content_type")); ct != "" {
		res.Response.Headers = map[string][]string{"Content-Type": {ct}}
	}
	return res, nil
}

// resolve settles an unknown operation on an admin's word, through the
// Operator's Resolve, as the control API does.
func (u *UI) resolve(w http.ResponseWriter, r *http.Request, s *session) {
	op, err := u.operationOf(r, s)
	if err != nil {
		u.storeFail(w, r, s, err, "operations")
		return
	}
	back := "operations/" + op.ID
	c := control.Of(s.principal)
	err = u.opts.Operator.RequireAdmin(c, "Resolving an operation")
	var res control.Resolution
	if err == nil {
		res, err = readResolution(r, op.ID)
	}
	if err == nil {
		op, err = u.opts.Operator.Resolve(r.Context(), c, res)
	}
	if err != nil {
		u.storeFail(w, r, s, err, back)
		return
	}
	u.opts.Logger.Info("ui resolve", slog.String("operation_id", op.ID), slog.String("principal", s.principal.Name),
		slog.String("to", string(op.State)))
	u.redirect(w, r, back+"?resolved")
}
