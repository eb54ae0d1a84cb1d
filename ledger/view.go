package ledger

import "time"

// View is an operation as the control API and the CLI render it (DESIGN.md,
// "The HTTP contract"), with its history. It leaves out the stored body and
// headers (they may hold personal data; the replay is the way to get them)
// and the owner token.
type View struct {
	Summary
	History []HistoryEntry `json:"history"`
}

// Summary is an operation without its history, as lists render it.
type Summary struct {
	ID          string        `json:"id"`
	Key         string        `json:"key"`
	Tenant      string        `json:"tenant"`
	Route       string        `json:"route"`
	State       State         `json:"state"`
	Fingerprint string        `json:"fingerprint"`
	Attempts    int           `json:"attempts"`
	CreatedAt   time.Time     `json:"created_at"`
	UpdatedAt   time.Time     `json:"updated_at"`
	LeaseUntil  *time.Time    `json:"lease_until"`
	ExpiresAt   time.Time     `json:"expires_at"`
	Response    *ResponseView `json:"response"`
	Approval    *ApprovalView `json:"approval"`
	LastError   string        `json:"last_error,omitempty"`
}

// ResponseView is the part of a stored response a view shows.
type ResponseView struct {
	Status int `json:"status"`
}

// ApprovalView is an operation's approval in a view.
type ApprovalView struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expires_at"`
}

// HistoryEntry is one transition in a view.
type HistoryEntry struct {
	From   *State    `json:"from"`
	To     State     `json:"to"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Reason string    `json:"reason"`
}

// ListView is a page of operations in a view.
type ListView struct {
	Operations []Summary `json:"operations"`
	Next       *string   `json:"next"`
}

// NewView renders op with its history.
func NewView(op *Operation, history []Event) View {
	v := View{Summary: NewSummary(op), History: []HistoryEntry{}}
	for _, e := range history {
		h := HistoryEntry{To: e.To, At: e.At.UTC(), Actor: e.Actor, Reason: e.Reason}
		if e.From != None {
			from := e.From
			h.From = &from
		}
		v.History = append(v.History, h)
	}
	return v
}

// NewSummary renders op without its history.
func NewSummary(op *Operation) Summary {
	v := Summary{ID: op.ID, Key: op.Key, Tenant: op.Tenant, Route: op.Route, State: op.State,
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
		v.Approval = &ApprovalView{ID: op.Approval.ID, Status: op.Approval.Status, ExpiresAt: op.Approval.ExpiresAt.UTC()}
	}
	return v
}

// NewListView renders a page.
func NewListView(p Page) ListView {
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
