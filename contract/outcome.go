package contract

import (
	"context"
	"errors"
	"net"
	"os"
)

// Fate is what an upstream's answer means for its operation
// (docs/design.md, "Operation states": upstream outcomes map to states).
type Fate int

// The fates of docs/design.md's outcome mapping.
const (
	FateSucceeded Fate = iota // stored, replayed
	FateFailed                // a definite refusal: stored, replayed
	FateReleased              // definitely not applied (e.g. 429): safe to retry
	FateUnknown               // may have been applied: never silently re-run
)

// DefaultClassify is docs/design.md's mapping: 2xx (and 3xx) succeeded;
// 4xx failed, except 408, 409, 425 and 429, which say "not now" and
// release the operation; 5xx unknown. The middleware, the gateway and the
// outbox's relay all start from it.
func DefaultClassify(status int) Fate {
	switch {
	case status < 400:
		return FateSucceeded
	case status == 408, status == 409, status == 425, status == 429:
		return FateReleased
	case status < 500:
		return FateFailed
	}
	return FateUnknown
}

// ErrNotSent marks an effect's error that sent nothing: the connection
// was refused, the name did not resolve, no session could be had. It is
// the one error that releases an operation.
var ErrNotSent = errors.New("nothing was sent")

// NotSent wraps err as an effect's error that sent nothing to surface's
// target ("upstream", "mcp", "target": the history's code is
// "<surface>_unreachable").
func NotSent(surface string, err error) error {
	return &effectError{surface: surface, err: err, notSent: true}
}

// NoAnswer wraps err as an effect's error after something may have
// reached surface's target: "<surface>_timeout" when it timed out,
// "<surface>_reset" otherwise.
func NoAnswer(surface string, err error) error { return &effectError{surface: surface, err: err} }

type effectError struct {
	surface string
	err     error
	notSent bool
}

func (e *effectError) Error() string { return e.err.Error() }
func (e *effectError) Unwrap() []error {
	if e.notSent {
		return []error{e.err, ErrNotSent}
	}
	return []error{e.err}
}

// ClassifyFailure is the one rule of an effect that got no answer
// (docs/design.md, "Operation states"): nothing sent, released; sent and
// no answer, unknown. The code says which, and whether it timed out:
// "<surface>_unreachable", "<surface>_timeout", "<surface>_reset". The
// keyed executor and the outbox's relay read it.
func ClassifyFailure(err error) (fate Fate, code string, timeout bool) {
	surface := surfaceOf(err)
	if errors.Is(err, ErrNotSent) {
		return FateReleased, surface + "_unreachable", false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err) {
		return FateUnknown, surface + "_timeout", true
	}
	return FateUnknown, surface + "_reset", false
}

// surfaceOf is the surface an effect's error names ("effect" for none).
func surfaceOf(err error) string {
	var e *effectError
	if errors.As(err, &e) && e.surface != "" {
		return e.surface
	}
	return "effect"
}

// targets are how a problem names each surface's target.
var targets = map[string]string{"upstream": "the upstream", "mcp": "the MCP server", "target": "the target"}

// TargetOf is how a problem names the target of err's surface.
func TargetOf(err error) string {
	if t, ok := targets[surfaceOf(err)]; ok {
		return t
	}
	return "the effect's target"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
