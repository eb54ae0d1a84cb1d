package httpidem

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// replay sends a final operation's stored response, byte for byte, marked
// as a replay.
func (m *Middleware) replay(ctx context.Context, w http.ResponseWriter, op *ledger.Operation) {
	if op.Kind == ledger.KindAction {
		m.replayAction(ctx, w, op)
		return
	}
	if op.Response == nil {
		m.replayWithoutResponse(ctx, w, op)
		return
	}
	h := w.Header()
	for k, v := range op.Response.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set(contract.HeaderReplayed, "true")
	h.Set(contract.HeaderOperation, op.ID)
	w.WriteHeader(op.Response.Status)
	_, _ = w.Write(op.Response.Body)
}

// replayWithoutResponse answers for an operation that ended without a
// stored answer, resolved by an operator who did not know it (a denial is
// the executor's problem): the operation's summary with its resolution,
// so that the agent cannot take the body for the upstream's.
func (m *Middleware) replayWithoutResponse(ctx context.Context, w http.ResponseWriter, op *ledger.Operation) {
	status := http.StatusOK
	if op.State == ledger.Failed {
		status = http.StatusUnprocessableEntity
	}
	body := contract.ResolvedReplay{Summary: contract.NewSummary(op), Resolution: m.resolution(ctx, op)}
	if m.opts.StatusBase != "" {
		body.StatusURL = m.opts.StatusBase + "/operations/" + op.ID
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(contract.HeaderReplayed, "true")
	w.Header().Set(contract.HeaderOperation, op.ID)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// resolution reads op's resolution from its history: the last move out
// of unknown, the only way to a final state without an answer.
func (m *Middleware) resolution(ctx context.Context, op *ledger.Operation) contract.ResolutionView {
	res := contract.ResolutionView{Detail: "an operator resolved this operation as " + string(op.State) +
		" without the upstream's answer: this body is the gateway's, not the upstream's"}
	history, err := m.x.Store().History(ctx, op.ID)
	if err != nil {
		m.opts.Logger.Error("history", "operation_id", op.ID, "error", err.Error())
		return res
	}
	for i := len(history) - 1; i >= 0; i-- {
		if e := history[i]; e.From == ledger.Unknown && e.To == op.State {
			at := e.At.UTC()
			res.By, res.Note, res.At = e.Actor, e.Reason, &at
			break
		}
	}
	return res
}
