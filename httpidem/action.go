package httpidem

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// grant answers 201 with the operation and its lease: the caller owns
// the effect, and ends the operation with its owner steps (complete,
// heartbeat, release, unknown) before the lease lapses. The token leaves
// the gateway in this answer only.
func (m *Middleware) grant(ctx context.Context, w http.ResponseWriter, res keyed.Result) {
	op := res.Op
	history, err := res.History, error(nil)
	if history == nil { // a lease on an operation made before: its history is read
		history, err = m.x.Store().History(ctx, op.ID)
	}
	if err != nil {
		// The lease is taken; its caller is told nothing, so the lease
		// lapses into unknown, which is the truth: nobody knows.
		m.opts.Logger.Error("action history", "operation_id", op.ID, "error", err.Error())
		contract.ProblemFor(err).For(op, m.opts.StatusBase).Write(w)
		return
	}
	w.Header().Set(contract.HeaderOperation, op.ID)
	if u := m.statusURL(op.ID); u != "" {
		w.Header().Set("Location", u)
	}
	writeJSON(w, http.StatusCreated, contract.ActionGrant{Operation: contract.NewView(op, history),
		Lease: contract.NewLeaseView(*res.Lease, true)})
}

// replayAction answers a final action's operation: its view and the
// result its owner or an operator recorded.
func (m *Middleware) replayAction(ctx context.Context, w http.ResponseWriter, op *ledger.Operation) {
	history, err := m.x.Store().History(ctx, op.ID)
	if err != nil {
		contract.ProblemFor(err).For(op, m.opts.StatusBase).Write(w)
		return
	}
	h := w.Header()
	h.Set(contract.HeaderReplayed, "true")
	h.Set(contract.HeaderOperation, op.ID)
	writeJSON(w, http.StatusOK, contract.ActionReplay{Operation: contract.NewView(op, history), Result: contract.ResultOf(op)})
}

// statusURL is the control API's resource of an operation ("" without a
// StatusBase).
func (m *Middleware) statusURL(id string) string {
	if m.opts.StatusBase == "" {
		return ""
	}
	return m.opts.StatusBase + "/operations/" + id
}

// writeJSON answers v as JSON, never cached: a lease is a secret.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
