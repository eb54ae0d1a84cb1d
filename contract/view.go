package contract

import (
	"encoding/json"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// View is an operation as the control API and the CLI render it (docs/design.md,
// "The web page"), with its history and its effects (an empty list when it
// has none; see WithEffects). It leaves out the stored body and headers
// (they may hold personal data; the replay is the way to get them) and the
// owner token.
type View struct {
	Summary
	History []HistoryEntry `json:"history"`
	Effects []EffectView   `json:"effects"`
}

// Summary is an operation without its history, as lists render it.
type Summary struct {
	ID          string        `json:"id"`
	Key         string        `json:"key"`
	Namespace   string        `json:"namespace"` // the key's (docs/design.md, "Words")
	Kind        ledger.Kind   `json:"kind"`      // route, action, mcp, consumer or webhook
	Tenant      string        `json:"tenant"`
	Route       string        `json:"route"`
	Target      string        `json:"target"`    // method and concrete path
	Principal   string        `json:"principal"` // who reserved it
	State       ledger.State  `json:"state"`
	Fingerprint string        `json:"fingerprint"`
	Attempts    int           `json:"attempts"`
	CreatedAt   time.Time     `json:"created_at"`
	UpdatedAt   time.Time     `json:"updated_at"`
	LeaseUntil  *time.Time    `json:"lease_until"`
	ExpiresAt   time.Time     `json:"expires_at"`
	Response    *ResponseView `json:"response"`
	ResultRef   string        `json:"result_ref"` // the upstream's reference for the effect
	Approval    *ApprovalView `json:"approval"`
	LastError   string        `json:"last_error,omitempty"`
}

// ResponseView is the part of a stored response a view shows.
type ResponseView struct {
	Status int `json:"status"`
}

// ApprovalView is an approval as the control API renders it (docs/design.md,
// "Approvals"): every member of the record, always present. In a list of
// operations only id, status and expires_at are known, and only they are
// rendered (see NewSummary).
type ApprovalView struct {
	ID          string          `json:"id"`
	OperationID string          `json:"operation_id"`
	Key         string          `json:"key"`
	Tenant      string          `json:"tenant"`
	Route       string          `json:"route"`
	Target      string          `json:"target"`
	Fingerprint string          `json:"fingerprint"`
	Summary     string          `json:"summary"`
	Command     json.RawMessage `json:"command"`
	// Headers are the request's headers that the approved execution sends
	// (credentials, tracing and content headers are the attempt's own).
	Headers     map[string][]string   `json:"headers"`
	Reversible  *bool                 `json:"reversible"`
	RequestedBy string                `json:"requested_by"`
	Approvers   []string              `json:"approvers"`
	Status      ledger.ApprovalStatus `json:"status"`
	CreatedAt   *time.Time            `json:"created_at"`
	ExpiresAt   time.Time             `json:"expires_at"`
	DecidedBy   string                `json:"decided_by"`
	DecidedAt   *time.Time            `json:"decided_at"`
	Note        string                `json:"note"`

	ref bool // only id, status and expires_at are known
}

// MarshalJSON renders the whole record, or, for an approval known only by
// its operation's reference, the three members known.
func (v ApprovalView) MarshalJSON() ([]byte, error) {
	if v.ref {
		return json.Marshal(struct {
			ID        string                `json:"id"`
			Status    ledger.ApprovalStatus `json:"status"`
			ExpiresAt time.Time             `json:"expires_at"`
		}{v.ID, v.Status, v.ExpiresAt})
	}
	type whole ApprovalView
	return json.Marshal(whole(v))
}

// NewApprovalView renders a whole approval.
func NewApprovalView(a *ledger.Approval) *ApprovalView {
	created, reversible := a.CreatedAt.UTC(), a.Reversible
	v := &ApprovalView{ID: a.ID, OperationID: a.OpID, Key: a.Key, Tenant: a.Tenant, Route: a.Route, Target: a.Target,
		Fingerprint: a.Fingerprint, Summary: a.Summary, Reversible: &reversible, RequestedBy: a.RequestedBy,
		Approvers: a.Approvers, Status: a.Status, CreatedAt: &created, ExpiresAt: a.ExpiresAt.UTC(),
		DecidedBy: a.DecidedBy, Note: a.Note, Headers: map[string][]string(a.Headers)}
	if v.Headers == nil {
		v.Headers = map[string][]string{}
	}
	if json.Valid(a.Command) {
		v.Command = json.RawMessage(a.Command)
	}
	if !a.DecidedAt.IsZero() {
		t := a.DecidedAt.UTC()
		v.DecidedAt = &t
	}
	return v
}

// ApprovalListView is a page of approvals in a view.
type ApprovalListView struct {
	Approvals []*ApprovalView `json:"approvals"`
	Next      *string         `json:"next"`
}

// NewApprovalListView renders a page of approvals.
func NewApprovalListView(p ledger.ApprovalPage) ApprovalListView {
	lv := ApprovalListView{Approvals: make([]*ApprovalView, 0, len(p.Approvals))}
	for _, a := range p.Approvals {
		lv.Approvals = append(lv.Approvals, NewApprovalView(a))
	}
	if p.Next != "" {
		next := p.Next
		lv.Next = &next
	}
	return lv
}

// HistoryEntry is one transition in a view.
type HistoryEntry struct {
	From   *ledger.State `json:"from"`
	To     ledger.State  `json:"to"`
	At     time.Time     `json:"at"`
	Actor  string        `json:"actor"`
	Reason string        `json:"reason"`
}

// ListView is a page of operations in a view.
type ListView struct {
	Operations []Summary `json:"operations"`
	Next       *string   `json:"next"`
}

// NewView renders op with its history.
func NewView(op *ledger.Operation, history []ledger.Event) View {
	v := View{Summary: NewSummary(op), History: []HistoryEntry{}, Effects: []EffectView{}}
	for _, e := range history {
		h := HistoryEntry{To: e.To, At: e.At.UTC(), Actor: e.Actor, Reason: e.Reason}
		if e.From != ledger.None {
			from := e.From
			h.From = &from
		}
		v.History = append(v.History, h)
	}
	return v
}

// WithApproval shows the operation's current approval whole (a is nil,
// or the approval op.Approval names).
func (v View) WithApproval(a *ledger.Approval) View {
	if a != nil && v.Approval != nil && a.ID == v.Approval.ID {
		v.Approval = NewApprovalView(a)
	}
	return v
}

// NewSummary renders op without its history.
func NewSummary(op *ledger.Operation) Summary {
	v := Summary{ID: op.ID, Key: op.Key, Namespace: op.Namespace, Kind: op.Kind, Tenant: op.Tenant, Route: op.Route,
		Target:    op.Target,
		Principal: op.Principal, ResultRef: op.ResultRef, State: op.State,
		Fingerprint: op.Fingerprint, Attempts: op.Attempts, CreatedAt: op.CreatedAt.UTC(),
		UpdatedAt: op.UpdatedAt.UTC(), ExpiresAt: op.ExpiresAt.UTC(), LastError: op.LastError}
	if !op.LeaseUntil.IsZero() {
		t := op.LeaseUntil.UTC()
		v.LeaseUntil = &t
	}
	if op.Response != nil {
		v.Response = &ResponseView{Status: op.Response.Status}
	}
	if op.Approval != nil {
		v.Approval = &ApprovalView{ID: op.Approval.ID, Status: op.Approval.Status, ExpiresAt: op.Approval.ExpiresAt.UTC(),
			ref: true}
	}
	return v
}

// NewListView renders a page.
func NewListView(p ledger.Page) ListView {
	lv := ListView{Operations: make([]Summary, 0, len(p.Operations))}
	for _, op := range p.Operations {
		lv.Operations = append(lv.Operations, NewSummary(op))
	}
	if p.Next != "" {
		next := p.Next
		lv.Next = &next
	}
	return lv
}
