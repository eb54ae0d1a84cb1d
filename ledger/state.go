// Package ledger is idemgate's domain: the operation, its five states, the
// only transitions allowed between them, and the Store every backend
// implements. It imports no driver; stores import it.
package ledger

import (
	"fmt"
	"slices"
)

// State is where an operation stands. See docs/design.md, "Operation states".
type State string

// The five states. None is the absence of an operation, the source of the
// two reserve transitions; it is never stored.
const (
	None      State = ""
	Prepared  State = "prepared"
	Executing State = "executing"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Unknown   State = "unknown"
)

// States lists the stored states, in lifecycle order.
var States = []State{Prepared, Executing, Succeeded, Failed, Unknown}

// Valid reports whether s is one of the five stored states.
func (s State) Valid() bool { return slices.Contains(States, s) }

// Final reports whether s is an end state: its response is stored and
// replayed, and nothing moves it again.
func (s State) Final() bool { return s == Succeeded || s == Failed }

// String names the state; None reads "(none)" in messages.
func (s State) String() string {
	if s == None {
		return "(none)"
	}
	return string(s)
}

// ParseState returns the State named s, or an error naming the five.
func ParseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return None, fmt.Errorf("unknown state %q (want one of %v)", s, States)
	}
	return st, nil
}

// Step names the store call that makes a transition. The same pair of states
// may be legal for one step and illegal for another: an owner may not
// "resolve" its own operation, and an operator may not "complete" one.
type Step string

// The steps of the Store interface.
const (
	StepReserve     Step = "reserve"      // (none) → executing, or (none) → prepared
	StepAcquire     Step = "acquire"      // prepared → executing
	StepResend      Step = "resend"       // unknown → executing, only where the upstream honours the key
	StepDeny        Step = "deny"         // prepared → failed: the approval was denied
	StepComplete    Step = "complete"     // executing → succeeded | failed, by the owner
	StepRelease     Step = "release"      // executing → prepared, by the owner: definitely not delivered
	StepMarkUnknown Step = "mark_unknown" // executing → unknown, by the owner
	StepExpire      Step = "expire"       // executing → unknown: the lease lapsed
	StepResolve     Step = "resolve"      // unknown → succeeded | failed | prepared, audited
	// StepCompleteLapsed is unknown → succeeded | failed, by the owner whose
	// lapsed lease the expiry took while it could not reach the store, with
	// the same token and fence: nobody has taken the operation since
	// (Outcome.AfterLapse).
	StepCompleteLapsed Step = "complete_after_lapse"
)

// Transition is one legal move.
type Transition struct {
	From, To State
	Step     Step
}

// transitions is docs/design.md's table and the one place it is encoded: every
// store asks Check or Sources, and nothing else decides what is legal.
var transitions = []Transition{
	{None, Executing, StepReserve},
	{None, Prepared, StepReserve},
	{Prepared, Executing, StepAcquire},
	{Prepared, Failed, StepDeny},
	{Executing, Succeeded, StepComplete},
	{Executing, Failed, StepComplete},
	{Executing, Prepared, StepRelease},
	{Executing, Unknown, StepMarkUnknown},
	{Executing, Unknown, StepExpire},
	{Unknown, Succeeded, StepResolve},
	{Unknown, Failed, StepResolve},
	{Unknown, Prepared, StepResolve},
	{Unknown, Executing, StepResend},
	{Unknown, Succeeded, StepCompleteLapsed},
	{Unknown, Failed, StepCompleteLapsed},
}

// Transitions returns a copy of the legal transitions.
func Transitions() []Transition { return slices.Clone(transitions) }

// Check returns nil if step may move an operation from one state to another,
// and an error wrapping ErrIllegalTransition otherwise.
func Check(step Step, from, to State) error {
	if slices.Contains(transitions, Transition{from, to, step}) {
		return nil
	}
	return &TransitionError{From: from, To: to, Step: step}
}

// Sources returns the states from which step may reach to, for stores to put
// in the WHERE clause of their conditional updates.
func Sources(step Step, to State) []State {
	var from []State
	for _, t := range transitions {
		if t.Step == step && t.To == to {
			from = append(from, t.From)
		}
	}
	return from
}

// Targets returns the states step may lead to.
func Targets(step Step) []State {
	var to []State
	for _, t := range transitions {
		if t.Step == step && !slices.Contains(to, t.To) {
			to = append(to, t.To)
		}
	}
	return to
}

// TransitionError is an attempt at a move the state machine forbids.
type TransitionError struct {
	From, To State
	Step     Step
}

// Error says which move was refused.
func (e *TransitionError) Error() string {
	switch {
	case e.To == None:
		return fmt.Sprintf("illegal transition: %s from %s", e.Step, e.From)
	case e.From == None && e.Step != StepReserve:
		return fmt.Sprintf("illegal transition: %s cannot lead to %s", e.Step, e.To)
	}
	return fmt.Sprintf("illegal transition: %s from %s to %s", e.Step, e.From, e.To)
}

// Unwrap makes errors.Is(err, ErrIllegalTransition) true.
func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }

// Source returns the one state from which step reaches to. docs/design.md's table
// has a single source for every (step, target) pair, which lets a store
// write the history row's "from" without reading the row first.
func Source(step Step, to State) (State, error) {
	from := Sources(step, to)
	if len(from) != 1 {
		return None, &TransitionError{From: None, To: to, Step: step}
	}
	return from[0], nil
}

// Actors the store itself records in the history.
const (
	ActorLeaseExpiry = "idemgate:lease-expiry"
)
