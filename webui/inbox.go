package webui

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"unicode/utf8"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/ledger"
)

// approvalItem is one approval as the inbox and its pages show it.
type approvalItem struct {
	A         *ledger.Approval
	Fields    []field // the command's members, by JSON Pointer
	Pretty    string  // the whole command, indented
	Pending   bool    // pending and not past its time
	CanDecide bool    // the session's principal may decide it now
	WhyNot    string  // why not, when it may not
	Soon      bool    // pending, and little time is left
	// Clip, in the inbox, cuts each long text to so many characters, with
	// a link to the approval's page, which shows it whole (0: whole);
	// MoreFields counts the fields left out.
	Clip       int
	MoreFields int
}

// The inbox's bounds: an agent that asks for many approvals with large
// commands must not make a page too large to read or to load (issue 24,
// 7.13). A card shows the first fields, each text cut to inboxClip
// characters; the approval's own page shows everything.
const (
	inboxPage   = 20
	inboxClip   = 240
	inboxFields = 12
)

// brief cuts it for the inbox.
func (it *approvalItem) brief() {
	it.Clip, it.Pretty = inboxClip, ""
	if n := len(it.Fields); n > inboxFields {
		it.Fields, it.MoreFields = it.Fields[:inboxFields], n-inboxFields
	}
}

// item builds what a page shows of a for p. Whether p may decide comes
// from the ledger's own rule (DecisionParams.Check), the one the store
// applies again when the decision is sent.
func (u *UI) item(a *ledger.Approval, p approval.Principal) approvalItem {
	now := u.opts.Now()
	it := approvalItem{A: a, Pending: a.Status == ledger.ApprovalPending && !now.After(a.ExpiresAt)}
	it.Fields, it.Pretty = fieldsOf(a.Command, u.opts.Amounts[a.Route])
	it.Soon = it.Pending && a.ExpiresAt.Sub(now) < u.opts.NearExpiry
	err := decision(a.ID, a.Fingerprint, "", p).Check(a, now)
	it.CanDecide = err == nil
	if err != nil {
		it.WhyNot = whyNot(err, a, p)
	}
	return it
}

// decision is p's decision on approval id, echoing fingerprint.
func decision(id, fingerprint, note string, p approval.Principal) ledger.DecisionParams {
	return ledger.DecisionParams{ApprovalID: id, Tenant: p.Tenant, Fingerprint: fingerprint, Actor: p.Name,
		Roles: p.Roles, Note: note}
}

// whyNot says in a sentence why Check refused p a decision on a.
func whyNot(err error, a *ledger.Approval, p approval.Principal) string {
	switch {
	case errors.Is(err, ledger.ErrForbidden) && a.RequestedBy == p.Name:
		return "You requested this operation, so you cannot decide it: another approver must."
	case errors.Is(err, ledger.ErrForbidden):
		return "Deciding this needs one of the roles " + joinRoles(a.Approvers) + ", which you do not hold."
	case errors.Is(err, ledger.ErrApprovalClosed) && a.Status == ledger.ApprovalPending:
		return "This approval expired undecided. The agent's next retry opens a new one."
	case errors.Is(err, ledger.ErrApprovalClosed):
		return "This approval is " + string(a.Status) + ": there is nothing left to decide."
	}
	return err.Error()
}

// inbox lists the tenant's pending approvals, oldest first.
func (u *UI) inbox(w http.ResponseWriter, r *http.Request, s *session) {
	p := s.principal
	if !u.seesInbox(p) {
		u.fail(w, r, s, http.StatusForbidden, "Not for your role",
			"The inbox is for approvers ("+joinRoles(u.opts.ApproverRoles)+") and admins.")
		return
	}
	pg, err := u.opts.Store.ListApprovals(r.Context(), ledger.ApprovalListParams{Tenant: p.Tenant,
		Status: ledger.ApprovalPending, After: r.URL.Query().Get("after"), Limit: inboxPage})
	if err != nil {
		u.storeFail(w, r, s, err, "")
		return
	}
	data := inboxData{Next: pg.Next, After: r.URL.Query().Get("after")}
	for _, a := range pg.Approvals {
		it := u.item(a, p)
		it.brief()
		data.Items = append(data.Items, it)
	}
	u.render(w, r, http.StatusOK, "inbox", u.page(s, "inbox", "Approvals inbox", data))
}

// inboxData is a page of the inbox.
type inboxData struct {
	Items []approvalItem
	Next  string // the cursor of the next page, or ""
	After string // this page's cursor: "" on the first
}

// approvalOf reads an approval of the session's tenant; another tenant's
// is not found, as on the control API (the Operator's read).
func (u *UI) approvalOf(r *http.Request, s *session) (*ledger.Approval, error) {
	return u.opts.Operator.Approval(r.Context(), control.Of(s.principal), r.PathValue("id"))
}

// approvalPage shows one approval whole, with the first step of a
// decision when one may be made.
func (u *UI) approvalPage(w http.ResponseWriter, r *http.Request, s *session) {
	a, err := u.approvalOf(r, s)
	if err != nil {
		u.storeFail(w, r, s, err, "inbox")
		return
	}
	pg := u.page(s, "inbox", "Approval "+a.ID, u.item(a, s.principal))
	switch r.URL.Query().Get("decided") {
	case "approve":
		pg.Notice = "Approved. The agent's next retry with the same key runs it, once."
	case "deny":
		pg.Notice = "Denied. The operation has failed, and every retry is told so."
	}
	u.render(w, r, http.StatusOK, "approval", pg)
}

// choice is a decision posted from a form.
type choice struct {
	Approve     bool
	Verb        string // "approve" or "deny"
	Fingerprint string
	Note        string
}

// readChoice reads a posted decision. The confirmation refuses what the
// decision would (a note over control.MaxNote), before anything is sent.
func readChoice(r *http.Request) (choice, error) {
	c := choice{Verb: r.PostFormValue("decision"), Fingerprint: r.PostFormValue("fingerprint"),
		Note: r.PostFormValue("note")}
	switch {
	case c.Verb != "approve" && c.Verb != "deny":
		return c, contract.NewProblem(contract.CodeInvalidCommand, "Choose approve or deny.")
	case utf8.RuneCountInString(c.Note) > control.MaxNote:
		return c, contract.NewProblem(contract.CodeInvalidCommand,
			fmt.Sprintf("The note is longer than %d characters.", control.MaxNote))
	}
	c.Approve = c.Verb == "approve"
	return c, nil
}

// confirm is the second step: it repeats what is decided, and the
// fingerprint the decision will echo, before anything is sent.
func (u *UI) confirm(w http.ResponseWriter, r *http.Request, s *session) {
	a, err := u.approvalOf(r, s)
	if err != nil {
		u.storeFail(w, r, s, err, "inbox")
		return
	}
	c, err := readChoice(r)
	if err != nil {
		u.storeFail(w, r, s, err, "approvals/"+a.ID)
		return
	}
	data := confirmData{Item: u.item(a, s.principal), Choice: c, Changed: c.Fingerprint != a.Fingerprint}
	u.render(w, r, http.StatusOK, "confirm", u.page(s, "inbox", "Confirm: "+c.Verb, data))
}

// confirmData is the confirmation step.
type confirmData struct {
	Item    approvalItem
	Choice  choice
	Changed bool // the form's fingerprint is not the approval's
}

// decide sends the decision to the store, which checks it again
// atomically: the fingerprint echoed, the roles, the requester, the time.
func (u *UI) decide(w http.ResponseWriter, r *http.Request, s *session) {
	a, err := u.approvalOf(r, s)
	if err != nil {
		u.storeFail(w, r, s, err, "inbox")
		return
	}
	back := "approvals/" + a.ID
	c, err := readChoice(r)
	if err != nil {
		u.storeFail(w, r, s, err, back)
		return
	}
	decided, err := u.opts.Operator.Decide(r.Context(), control.Of(s.principal),
		control.Decision{ApprovalID: a.ID, Approve: c.Approve, Fingerprint: c.Fingerprint, Note: c.Note})
	if err != nil {
		u.opts.Logger.Warn("ui decision refused", slog.String("approval", a.ID), slog.String("principal", s.principal.Name),
			slog.String("decision", c.Verb), slog.String("error", err.Error()))
		u.storeFail(w, r, s, err, back)
		return
	}
	u.opts.Logger.Info("ui decision", slog.String("approval", a.ID), slog.String("operation_id", decided.OpID),
		slog.String("principal", s.principal.Name), slog.String("decision", c.Verb))
	u.redirect(w, r, back+"?decided="+c.Verb)
}
