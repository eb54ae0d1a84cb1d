package httpidem

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
)

// answer writes what the executor's result means in HTTP: the handler's
// answer (held by c), a replay, a problem, a 202 waiting for a human, or
// an action's grant.
func (m *Middleware) answer(ctx context.Context, w http.ResponseWriter, res keyed.Result, c *capture) {
	if res.Duplicate {
		w.Header().Set(contract.HeaderDuplicateOf, res.Op.ID)
	}
	switch {
	case res.Streamed:
		// The answer went already, as it came: nothing is left to say.
	case res.Problem != nil:
		res.Problem.Write(w)
	case res.Accepted != nil:
		m.accepted(w, res.Accepted)
	case res.Lease != nil:
		m.grant(ctx, w, res)
	case res.Replayed:
		m.replay(ctx, w, res.Op)
	default:
		if res.Unrecorded {
			c.Header().Set(contract.HeaderUnrecorded, "true")
		}
		c.flush()
	}
}

// accepted answers 202 for an operation waiting for its approval, with
// the approval's summary, so that the caller can tell a human what waits.
func (m *Middleware) accepted(w http.ResponseWriter, acc *contract.Accepted) {
	contract.NoteCode(w, acc.Code)
	h := w.Header()
	if acc.StatusURL != "" {
		h.Set("Location", acc.StatusURL)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set(contract.HeaderOperation, acc.OperationID)
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(acc)
}
