package contract

import (
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// EffectView is one of an operation's effects as its view renders it
// (docs/design.md, "Multi-effect operations and the outbox"): never its body or
// headers, which may hold personal data or credentials.
type EffectView struct {
	ID        string       `json:"id"`
	Name      string       `json:"name"`
	Key       string       `json:"key"`
	Target    string       `json:"target"`
	State     ledger.State `json:"state"`
	Attempts  int          `json:"attempts"`
	Status    int          `json:"status,omitempty"` // the target's last answer
	ResultRef string       `json:"result_ref"`
	LastError string       `json:"last_error"`
	// NextAt is when a prepared or unknown effect is due again; null when
	// final, being delivered, or waiting for an operator (WaitsForOperator).
	NextAt           *time.Time `json:"next_at"`
	WaitsForOperator bool       `json:"waits_for_operator"`
	ResolvedBy       string     `json:"resolved_by,omitempty"`
	Note             string     `json:"note,omitempty"`
}

// NewEffectViews renders an operation's effects, in their order; none is
// an empty list, never null.
func NewEffectViews(es []*ledger.Effect) []EffectView {
	out := make([]EffectView, 0, len(es))
	for _, e := range es {
		v := EffectView{ID: e.ID, Name: e.Name, Key: e.Key, Target: e.Target, State: e.State, Attempts: e.Attempts,
			Status: e.Status, ResultRef: e.ResultRef, LastError: e.LastError, WaitsForOperator: e.Parked(),
			ResolvedBy: e.ResolvedBy, Note: e.Note}
		if !e.NextAt.IsZero() {
			t := e.NextAt.UTC()
			v.NextAt = &t
		}
		out = append(out, v)
	}
	return out
}

// WithEffects shows the operation's effects (the store's Effects of its
// tenant and key), in their order.
func (v View) WithEffects(es []*ledger.Effect) View {
	v.Effects = NewEffectViews(es)
	return v
}
