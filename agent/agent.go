// Package agent is the agent side of idemgate: a client that keeps the
// identity of one intended action across timeouts, retries and its own
// restarts. An intent (the caller's name for one logical action) maps to a
// key made once and written to a journal before the first request leaves
// (derived from the agent's secret, see Keys, so that a lost journal makes
// the same key again); each error family gets the retry the workflow
// article prescribes, and an answer lost after sending is reconciled with
// the gateway, never retried blind.
package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
)

// Mode says how an action relates to what its intent already did.
type Mode string

// The three things "retry" can mean, named so nobody has to guess.
const (
	// Resume is the same intent again: same key. The default.
	Resume Mode = "resume"
	// Repeat is deliberately a new, identical action: a new intent
	// ("<name>#<n>") with a new key.
	Repeat Mode = "repeat"
	// Revise changes the parameters: a new version of the intent, new key.
	Revise Mode = "revise"
)

// Action is one write the agent intends.
type Action struct {
	Intent string
	Method string
	Path   string // with its query, relative to the gateway's URL
	Body   []byte // JSON, or empty
	Mode   Mode
}

// Kind is what became of an action.
type Kind string

// The outcome kinds.
const (
	Created       Kind = "created"        // performed now
	Replayed      Kind = "replayed"       // performed before; this is the stored answer
	InProgress    Kind = "in_progress"    // still executing when the budget ran out
	NeedsApproval Kind = "needs_approval" // waiting for a human (202)
	Conflict      Kind = "conflict"       // the key was used with another request (422)
	Rejected      Kind = "rejected"       // validation or business refusal: fix the request
	Unauthorized  Kind = "unauthorized"   // bad token, wrong role or tenant
	Unknown       Kind = "unknown"        // may have happened: reconcile, do not retry
	Failed        Kind = "failed"         // a definite failure, or transient errors past the budget
)

// Final says the intent is settled: nothing it sent can still take effect
// on its own, so a repeat or a revise may follow. A failed intent may still
// succeed when resumed (see Outcome.Unfinished).
func (k Kind) Final() bool {
	switch k {
	case Created, Replayed, Conflict, Rejected, Unauthorized, Failed:
		return true
	}
	return false
}

// Outcome is the result of Do.
type Outcome struct {
	Kind        Kind        `json:"kind"`
	Intent      string      `json:"intent"`
	Version     int         `json:"version"`
	Key         string      `json:"key"`
	OperationID string      `json:"operation_id,omitempty"`
	Status      int         `json:"status,omitempty"`
	Body        []byte      `json:"-"`
	Header      http.Header `json:"-"`
	Attempts    int         `json:"attempts"`
	// Sent is what the journal knows of whether a request of this intent
	// reached the gateway: "no" means nothing can have happened.
	Sent Sent `json:"sent"`
	// Reason is what happened, in words: the answer (status, problem code
	// and detail), the transport's error ("gateway unreachable: connection
	// refused"), or what the gateway said when asked. Never empty after Do.
	Reason string `json:"reason"`
	// Unfinished says the call stopped before the policy was done: the
	// retry budget ran out, or the gateway could not be asked. Resuming the
	// intent later goes on from there, and may change the outcome.
	Unfinished bool `json:"unfinished"`
	// Expired says the gateway no longer holds the operation (or may have
	// purged it): it cannot tell more, so asking it again will not help.
	Expired bool `json:"expired"`
	// Approval is the human decision the gateway named for the operation
	// in the answer (a 202) or the lookup this outcome comes from: for
	// NeedsApproval, the one it waits for (after an approval_expired 202,
	// the new one). Nil when that answer named none: a denial (403
	// approval_denied) or an executed answer carries none.
	Approval *ApprovalInfo `json:"approval,omitempty"`
}

// ErrPayloadChanged is a resume whose request differs from the intent's:
// nothing is sent. Revise it, or name a new intent.
var ErrPayloadChanged = errors.New("the request differs from the one this intent was created with")

// ErrNotSettled refuses a repeat or a revise while the intent's last
// action may still take effect: reconcile it first (the workflow article's
// rule), or it could happen twice.
var ErrNotSettled = errors.New("reconcile it before a new action (operation_status, or an operator's resolution)")

// ErrInvalidAction is an action that cannot be sent as it is.
var ErrInvalidAction = errors.New("invalid action")

// Client sends actions through a gateway.
type Client struct {
	BaseURL string // the gateway, e.g. http://127.0.0.1:8080
	Token   string // the agent's bearer token
	Journal *Journal
	HTTP    *http.Client // default: no keep-alive reuse across a failed write, 30s per attempt
	Policy  Policy
	Clock   Clock // default: the real clock
	// Run is the agent's own name for the run it is part of (a workflow,
	// a conversation), sent as Idempotency-Run with every request, so
	// that the gateway's audit log says which run sent each write. Empty:
	// the journal's process run (Journal.Run). A Run that CheckRun refuses
	// makes Do, Prepare and Status fail with ErrInvalidRun, before
	// anything is written or sent.
	Run string
	// Keys derive the key of each new intent (and version) from the
	// agent's secret, so that a lost journal resumes with the same keys.
	// Nil: each key is 128 random bits the journal alone remembers. Keys
	// already in the journal are kept either way.
	Keys *Keys
	// RefuseDuplicates refuses a new intent, version or repeat whose
	// request is that of another intent that may still take effect
	// (sent, and unknown, in progress, waiting for approval, or never
	// recorded): a *DuplicateError, before anything is written or sent.
	// idemgate mcp sets it: a model that names a new intent for a write
	// whose outcome is still open would otherwise make a second effect.
	RefuseDuplicates bool
}

// ErrOpenDuplicate is a new action whose request is that of an intent
// that may still take effect: reconcile that one first.
var ErrOpenDuplicate = errors.New("the same request is still open under another intent")

// DuplicateError names the open intent a new action would duplicate.
type DuplicateError struct {
	Open *Entry
}

// Error names the open intent and what became of it.
func (e *DuplicateError) Error() string {
	kind := string(e.Open.LastKind)
	if kind == "" {
		kind = "sent, its answer never recorded"
	}
	return fmt.Sprintf("%v: intent %q is %s", ErrOpenDuplicate, e.Open.Intent, kind)
}

// Unwrap makes a DuplicateError an ErrOpenDuplicate.
func (e *DuplicateError) Unwrap() error { return ErrOpenDuplicate }

// refuseDuplicate is RefuseDuplicates' check of a new entry.
func (c *Client) refuseDuplicate(ctx context.Context, want Entry) error {
	if !c.RefuseDuplicates {
		return nil
	}
	open, err := c.Journal.openWith(ctx, want.Fingerprint)
	if err != nil || open == nil {
		return err
	}
	return &DuplicateError{Open: open}
}

// ErrInvalidRun is a Client.Run that cannot be sent as Idempotency-Run.
var ErrInvalidRun = errors.New("invalid run id")

// CheckRun says whether run can name an agent run (Client.Run): 1 to
// contract.MaxRunLen bytes of printable UTF-8, neither starting nor
// ending with a space, since a header's surrounding spaces are dropped
// and it would not arrive as written.
func CheckRun(run string) error {
	switch {
	case run == "" || len(run) > contract.MaxRunLen:
		return fmt.Errorf("%w: want 1 to %d bytes, got %d", ErrInvalidRun, contract.MaxRunLen, len(run))
	case !utf8.ValidString(run):
		return fmt.Errorf("%w: not UTF-8", ErrInvalidRun)
	case strings.TrimSpace(run) != run:
		return fmt.Errorf("%w: %q starts or ends with a space", ErrInvalidRun, run)
	case strings.IndexFunc(run, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%w: %q has a control or non-printing character", ErrInvalidRun, run)
	}
	return nil
}

// checkRun refuses a Run the client could not send.
func (c *Client) checkRun() error {
	if c.Run == "" {
		return nil
	}
	return CheckRun(c.Run)
}

// runID is the agent run the client's requests name: its Run, or the
// journal's process run.
func (c *Client) runID() string {
	if c.Run == "" {
		return c.Journal.Run()
	}
	return c.Run
}

// Do performs an action: it finds or makes its intent's key in the journal,
// then sends it with the policy's retries, and records every attempt.
func (c *Client) Do(ctx context.Context, a Action) (Outcome, error) {
	if err := c.checkRun(); err != nil {
		return Outcome{}, err
	}
	e, err := c.entry(ctx, a)
	if err != nil {
		return Outcome{}, err
	}
	return c.run(ctx, e, a.Body)
}

// entry finds or makes the journal entry an action runs under.
func (c *Client) entry(ctx context.Context, a Action) (*Entry, error) {
	if a.Intent == "" {
		return nil, fmt.Errorf("%w: an intent names the action", ErrInvalidAction)
	}
	switch a.Mode {
	case "", Resume, Repeat, Revise:
	default:
		return nil, fmt.Errorf("%w: mode %q (want resume, repeat or revise)", ErrInvalidAction, a.Mode)
	}
	fp, err := actionFingerprint(a)
	if err != nil {
		return nil, err
	}
	want := Entry{Intent: a.Intent, Version: 1, Method: strings.ToUpper(a.Method), Path: a.Path, Fingerprint: fp}
	latest, err := c.Journal.Latest(ctx, a.Intent)
	if errors.Is(err, ErrNoIntent) && a.Mode != Revise {
		return c.created(ctx, want)
	}
	if err != nil {
		return nil, err
	}
	if a.Mode == Resume || a.Mode == "" {
		if latest.Fingerprint != fp && latest.Fingerprint != legacyFingerprint(a) {
			return nil, fmt.Errorf("intent %q: %w; use revise for changed parameters", a.Intent, ErrPayloadChanged)
		}
		return latest, nil
	}
	// A new action while the last one may still happen (unknown, in
	// progress, awaiting approval) could be a second effect: reconcile first.
	if latest.Attempts > 0 && !latest.LastKind.Final() {
		return nil, fmt.Errorf("intent %q is %s: %w", latest.Intent, latest.LastKind, ErrNotSettled)
	}
	if a.Mode == Repeat {
		if latest.Fingerprint != fp {
			return nil, fmt.Errorf("intent %q: %w; repeat means an identical action, use revise", a.Intent, ErrPayloadChanged)
		}
		if err := c.refuseDuplicate(ctx, want); err != nil {
			return nil, err
		}
		return c.Journal.createRepeat(ctx, want, c.keyFor)
	}
	if latest.Fingerprint == fp {
		return nil, fmt.Errorf("%w: revise of intent %q changes nothing; resume it, or repeat it", ErrInvalidAction, a.Intent)
	}
	want.Version = latest.Version + 1 // Revise
	return c.created(ctx, want)
}

// created makes a version of an intent; another caller who made the same
// version first with another request wins, and this one is refused.
func (c *Client) created(ctx context.Context, want Entry) (*Entry, error) {
	if err := c.refuseDuplicate(ctx, want); err != nil {
		return nil, err
	}
	e, err := c.Journal.create(ctx, want, c.keyFor)
	if err != nil {
		return nil, err
	}
	if e.Fingerprint != want.Fingerprint || e.Method != want.Method || e.Path != want.Path {
		return nil, fmt.Errorf("intent %q was just created by another caller with another request: %w",
			want.Intent, ErrPayloadChanged)
	}
	return e, nil
}

// legacyFingerprint is actionFingerprint as journals written before the
// fingerprint covered params and query hold it (sha256 of the canonical
// {"method","route","tenant","command"}), so that an intent journaled
// then resumes after an upgrade instead of looking changed.
func legacyFingerprint(a Action) string {
	var body any
	if len(a.Body) > 0 {
		v, err := fingerprint.Parse(a.Body, fingerprint.Limits{})
		if err != nil {
			return ""
		}
		body = v
	}
	doc, err := fingerprint.Canonical(map[string]any{"method": strings.ToUpper(a.Method), "route": a.Path,
		"tenant": "agent", "command": body})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(doc)
	return fingerprint.Prefix + hex.EncodeToString(sum[:])
}

// actionFingerprint binds an intent to its request: method, path and the
// body's canonical JSON, so that key order and spacing do not matter.
func actionFingerprint(a Action) (string, error) {
	if a.Method == "" || !strings.HasPrefix(a.Path, "/") {
		return "", fmt.Errorf("%w: want a method and a path starting with /", ErrInvalidAction)
	}
	var body any
	if len(a.Body) > 0 {
		v, err := fingerprint.Parse(a.Body, fingerprint.Limits{})
		if err != nil {
			return "", fmt.Errorf("%w: body: %v", ErrInvalidAction, err)
		}
		body = v
	}
	return fingerprint.Of(fingerprint.Request{Method: strings.ToUpper(a.Method), Route: a.Path, Tenant: "agent",
		Command: body})
}

func (c *Client) clock() Clock {
	if c.Clock == nil {
		return realClock{}
	}
	return c.Clock
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP == nil {
		return defaultHTTP
	}
	return c.HTTP
}

var defaultHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

// Prepare writes an action's intent to the journal without sending it,
// naming the intent ("intent-…") when the action has none: a caller that
// may lose its own memory (a model's context) learns the identity before
// any effect can happen.
//
// An unnamed action identical to an intent made in the last day returns
// that intent (existing true) instead of a new one: a caller that forgot
// its intent and asks again must not get a second key for the same action.
// A second identical action is asked for with Repeat.
func (c *Client) Prepare(ctx context.Context, a Action) (e *Entry, existing bool, err error) {
	if err := c.checkRun(); err != nil {
		return nil, false, err
	}
	if a.Intent != "" {
		e, err = c.entry(ctx, a)
		return e, false, err
	}
	if a.Mode != "" && a.Mode != Resume {
		return nil, false, fmt.Errorf("%w: mode %q needs the intent it applies to", ErrInvalidAction, a.Mode)
	}
	fp, err := actionFingerprint(a)
	if err != nil {
		return nil, false, err
	}
	if e, err = c.Journal.recentWith(ctx, fp, time.Now().Add(-24*time.Hour)); err == nil || !errors.Is(err, ErrNoIntent) {
		return e, err == nil, err
	}
	a.Intent = "intent-" + newKey()[:12]
	e, err = c.entry(ctx, a)
	return e, false, err
}
