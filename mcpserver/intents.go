package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/idemgate/idemgate/agent"
)

// A model that may name intents itself can make a second effect: after a
// write ends unknown, a new name ("I#2" typed by hand, or any other) is a
// new key for the same write. So the server names intents, never the
// model: each name it hands out carries a seal, a MAC under the agent's
// secret ("NAME~MAC", agent.Keys.Seal), and a name is taken only if its
// seal is the agent's or the journal already holds it (written before
// names were sealed, or by idemgate call on the same journal). A sealed
// name proves itself without the journal, so an intent whose journal was
// lost is still resumed, and replayed under its derived key.

// ErrNotHandedOut is an intent this server never handed out.
var ErrNotHandedOut = errors.New("never handed out by this server")

// named is the journal's name of the intent the model gave, with step the
// step it names of it (a workflow's intent may be journaled only as its
// steps), or ErrNotHandedOut.
func (h *handlers) named(ctx context.Context, intent, step string) (string, error) {
	if k := h.c.Keys; k != nil {
		if name, ok := k.Open(intent); ok {
			return name, nil
		}
	}
	held, err := h.c.Journal.Holds(ctx, intent, step != "")
	if err != nil {
		return "", err
	}
	if !held {
		return "", fmt.Errorf("intent %q was %w: nothing was sent. Use an intent exactly as a submit_write "+
			"result gave it (with what follows its %q), or call submit_write without an intent to get a new "+
			"one; list_operations lists the open ones", intent, ErrNotHandedOut, agent.SealSep)
	}
	return intent, nil
}

// seal is the name the model is given for the journal's intent name.
func (h *handlers) seal(name string) string {
	if h.c.Keys == nil || name == "" {
		return name
	}
	return h.c.Keys.Seal(name)
}

// refusal says why a write was refused before anything was sent: for a
// new intent whose request is still open under another, which one, and
// what to do about it.
func (h *handlers) refusal(err error) error {
	var dup *agent.DuplicateError
	if !errors.As(err, &dup) {
		return err
	}
	e := dup.Open
	o := agent.Outcome{Intent: e.Intent, Kind: e.LastKind, OperationID: e.OperationID, Attempts: e.Attempts,
		Sent: e.Sent, Reason: journalReason(e)} // no status: the next step points only at the reason, given here
	if o.Kind == "" {
		o.Kind = agent.Unknown // sent, its answer never recorded: it may have been applied
	}
	return fmt.Errorf("refused, and nothing was sent: this request is that of intent %q, which is %s (%s) and may "+
		"still take effect, so a new intent for it could be a second action. Work on with intent %q instead: %s",
		h.seal(e.Intent), o.Kind, o.Reason, h.seal(e.Intent), NextStep(o))
}

// newWorkflow hands out the intent of a new workflow: nothing is written
// until its first step is sent.
func (h *handlers) newWorkflow(step string) (Result, error) {
	if err := agent.CheckStepName(step); err != nil {
		return Result{}, err
	}
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	intent := h.seal("workflow-" + base64.RawURLEncoding.EncodeToString(b))
	return Result{Intent: intent, Step: step, Kind: "intent_created", Sent: string(agent.SentNo),
		Reason: "nothing was sent: a new workflow intent was made",
		NextStep: fmt.Sprintf("Nothing was sent yet. Call submit_write again with intent %q, step %q and the same "+
			"method, path and body to perform this step; give every step of this task that intent, and reuse it "+
			"on every retry.", intent, step)}, nil
}
