package agent

import (
	"context"
	"fmt"
	"strings"
)

// A workflow is one intent with several effects (the workflow article's
// dossier_42:v5: make the PDF, store it, send the link, write the CRM).
// Hiding them under one key would make a resume either redo the effects
// that succeeded or skip the one that did not; so each step is an intent
// of its own, derived from the workflow's, with its own key and its own
// journal entry, and a resume goes on at the first step not done.

// Step is one named write of a workflow.
type Step struct {
	Name   string // see CheckStepName
	Method string
	Path   string // with its query, relative to the gateway's URL
	Body   []byte // JSON, or empty
}

// Workflow is an intent performed as ordered steps, each at most once.
type Workflow struct {
	Intent string
	Steps  []Step
}

// ErrInvalidStep is a step name a workflow cannot use; it is also an
// ErrInvalidAction, so that callers refusing bad actions refuse it too.
var ErrInvalidStep = fmt.Errorf("%w: invalid step", ErrInvalidAction)

// maxStepName bounds a step name, which every key lookup and audit line
// of the step carries inside its intent.
const maxStepName = 64

// CheckStepName says whether name can name a step: 1 to 64 ASCII
// letters, digits, '.', '_', ':' or '-'. Not '/', which joins the
// workflow's intent to the step (so the step is the intent's last
// segment, whatever the workflow's intent holds), nor '#', which numbers
// an intent's repeats ("<intent>#2"): either would let two different
// steps derive one intent, and so share one key.
func CheckStepName(name string) error {
	if name == "" || len(name) > maxStepName {
		return fmt.Errorf("%w: name %q: want 1 to %d characters", ErrInvalidStep, name, maxStepName)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r)
		if !ok {
			return fmt.Errorf("%w: name %q: only letters, digits, '.', '_', ':' and '-' (not %q)",
				ErrInvalidStep, name, r)
		}
	}
	return nil
}

// StepIntent is the intent a step of the workflow intent runs under,
// "<intent>/<step>". Its key is that intent's key, made once when the
// step is first written to the journal, and kept: with Client.Keys,
// derived from the agent's secret and the step's intent, so that a lost
// journal resumes each step with the same key; without, 128 random bits
// that only this journal knows. Do with
// Action.Intent set to StepIntent's result is that step, as RunWorkflow
// runs it (idemgate call --step and the MCP step argument do just that).
func StepIntent(intent, step string) (string, error) {
	if intent == "" {
		return "", fmt.Errorf("%w: a step needs its workflow's intent", ErrInvalidAction)
	}
	if err := CheckStepName(step); err != nil {
		return "", err
	}
	return intent + "/" + step, nil
}

// StepOutcome is what became of one step in RunWorkflow.
type StepOutcome struct {
	Name string `json:"name"`
	// Skipped says the journal held the step succeeded (created or
	// replayed) before this run: nothing was sent for it, not even a
	// lookup, and its outcome is the journal's (with no body).
	Skipped bool `json:"skipped"`
	// Ran says this run sent the step, or asked the gateway about it.
	// A step neither skipped nor run comes after the one the run stopped
	// at: its outcome is what the journal holds (kind "" if never sent).
	Ran     bool    `json:"ran"`
	Outcome Outcome `json:"outcome"`
}

// Succeeded says the step's write happened (now or before), once.
func (s StepOutcome) Succeeded() bool { return succeeded(s.Outcome.Kind) }

func succeeded(k Kind) bool { return k == Created || k == Replayed }

// WorkflowOutcome is the result of RunWorkflow: every step, in order.
type WorkflowOutcome struct {
	Intent string        `json:"intent"`
	Steps  []StepOutcome `json:"steps"`
	// Done says every step succeeded.
	Done bool `json:"done"`
	// StoppedAt names the first step that did not succeed ("" when Done,
	// or when the run was refused before any step ran).
	StoppedAt string `json:"stopped_at,omitempty"`
	// Reason is why it stopped (the step's kind and its own reason), or
	// what a run that finished did. Resuming (RunWorkflow again, the same
	// workflow) goes on at StoppedAt.
	Reason string `json:"reason"`
}

// RunWorkflow performs the workflow's steps in order, each as Do with
// Resume under its StepIntent. Every step is written to the journal, with
// its key, before the first request of the run leaves, so that a crash at
// any point leaves each step's identity on disk; and a step whose request
// differs from the one journaled under its intent stops the run with
// ErrPayloadChanged before anything is sent, as Do does for one intent.
//
// A step the journal holds succeeded is skipped, unsent. The run goes on
// at the first step that is not, resuming it as Do does (an unknown or
// in-progress step is asked about first, never re-sent blind), and stops
// at the first step that does not succeed: later steps are not sent.
// An error (the journal failed, ctx ended) comes with the outcome so far.
func (c *Client) RunWorkflow(ctx context.Context, w Workflow) (WorkflowOutcome, error) {
	out := WorkflowOutcome{Intent: w.Intent}
	if err := c.checkRun(); err != nil {
		return out, err
	}
	entries, err := c.prepareSteps(ctx, w)
	if err != nil {
		return out, err
	}
	out.Steps = make([]StepOutcome, len(w.Steps))
	for i, s := range w.Steps { // a step not reached is shown as the journal holds it
		out.Steps[i] = StepOutcome{Name: s.Name, Outcome: journalOutcome(entries[i])}
	}
	for i, s := range w.Steps {
		e := entries[i]
		if succeeded(e.LastKind) {
			out.Steps[i].Skipped = true
			out.Steps[i].Outcome.Reason = fmt.Sprintf("%s before this run: skipped, nothing sent", e.LastKind)
			continue
		}
		o, err := c.run(ctx, e, s.Body)
		out.Steps[i].Ran, out.Steps[i].Outcome = true, o
		if err != nil {
			out.StoppedAt, out.Reason = s.Name, fmt.Sprintf("step %q was interrupted: %v", s.Name, err)
			return out, err
		}
		if !succeeded(o.Kind) {
			out.StoppedAt, out.Reason = s.Name, fmt.Sprintf("step %q is %s: %s", s.Name, o.Kind, o.Reason)
			return out, nil
		}
	}
	out.Done, out.Reason = true, doneReason(out.Steps)
	return out, nil
}

// prepareSteps checks the workflow and finds or makes every step's
// journal entry, in order, before anything is sent.
func (c *Client) prepareSteps(ctx context.Context, w Workflow) ([]*Entry, error) {
	if len(w.Steps) == 0 {
		return nil, fmt.Errorf("%w: workflow %q has no steps", ErrInvalidAction, w.Intent)
	}
	seen := make(map[string]bool, len(w.Steps))
	actions := make([]Action, len(w.Steps))
	for i, s := range w.Steps {
		intent, err := StepIntent(w.Intent, s.Name)
		if err != nil {
			return nil, fmt.Errorf("workflow %q, step %d: %w", w.Intent, i+1, err)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("workflow %q: %w: name %q is used twice", w.Intent, ErrInvalidStep, s.Name)
		}
		seen[s.Name] = true
		actions[i] = Action{Intent: intent, Method: s.Method, Path: s.Path, Body: s.Body, Mode: Resume}
		if _, err := actionFingerprint(actions[i]); err != nil { // all refused before any is journaled
			return nil, fmt.Errorf("workflow %q, step %q: %w", w.Intent, s.Name, err)
		}
	}
	entries := make([]*Entry, len(actions))
	for i, a := range actions {
		e, err := c.entry(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("workflow %q, step %q: %w", w.Intent, w.Steps[i].Name, err)
		}
		entries[i] = e
	}
	return entries, nil
}

// journalOutcome is what the journal holds of an entry, as an Outcome.
func journalOutcome(e *Entry) Outcome {
	o := Outcome{Kind: e.LastKind, Intent: e.Intent, Version: e.Version, Key: e.Key, OperationID: e.OperationID,
		Status: e.LastStatus, Attempts: e.Attempts, Sent: e.Sent, Reason: "not run: an earlier step did not succeed"}
	if e.LastKind != "" {
		o.Reason += fmt.Sprintf("; the journal last recorded %s", e.LastKind)
	}
	return o
}

// doneReason says what a finished run did.
func doneReason(steps []StepOutcome) string {
	skipped := 0
	for _, s := range steps {
		if s.Skipped {
			skipped++
		}
	}
	if skipped == 0 {
		return fmt.Sprintf("all %d steps succeeded", len(steps))
	}
	return fmt.Sprintf("all %d steps succeeded (%d before this run, skipped)", len(steps), skipped)
}
