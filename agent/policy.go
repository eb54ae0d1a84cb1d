package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// Policy bounds the retries of one Do call.
type Policy struct {
	MaxAttempts int           // requests sent, at most (default 5)
	MaxElapsed  time.Duration // time spent, at most (default 2m)
	BaseDelay   time.Duration // first backoff ceiling (default 200ms)
	MaxDelay    time.Duration // backoff ceiling (default 10s)
	// Wait is sent as Prefer: wait=N on a retry that meets its own
	// operation in flight, so that it waits for its answer (default 10s).
	// Other requests carry no Prefer: wait, since the gateway holds any
	// request that meets a pending approval for its decision (see
	// ApprovalWait).
	Wait time.Duration
	// ApprovalWait is how long a Do call waits for a human's decision on
	// an operation that needs one (0: it does not wait, and returns
	// NeedsApproval at once). Meanwhile it sends the same request with the
	// same key and Prefer: wait=N (N the seconds left, at most 60 per
	// request and half the HTTP client's timeout), which the gateway holds
	// until the decision: it returns the executed outcome once approved,
	// Failed once denied, and NeedsApproval when the wait is spent. Those
	// requests are journaled as any other, and are not counted against
	// MaxAttempts or MaxElapsed.
	ApprovalWait time.Duration
	// GatewayRetention is how long the gateway keeps an operation after
	// its last change (its default: 24h). Past it, "no such operation"
	// may mean "done and purged", and an intent whose answer was never
	// recorded is no longer sent again.
	GatewayRetention time.Duration
}

func (p Policy) withDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = 2 * time.Minute
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 200 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 10 * time.Second
	}
	if p.Wait <= 0 {
		p.Wait = 10 * time.Second
	}
	if p.GatewayRetention <= 0 {
		p.GatewayRetention = 24 * time.Hour
	}
	return p
}

// backoff is exponential with full jitter: uniform in [0, min(max,
// base·2^(n-1))) before attempt n+1, so that many agents failing together
// do not come back together.
func (p Policy) backoff(n int, random func() float64) time.Duration {
	ceiling := p.BaseDelay << min(n-1, 30)
	if ceiling <= 0 || ceiling > p.MaxDelay {
		ceiling = p.MaxDelay
	}
	return time.Duration(random() * float64(ceiling))
}

// Clock is time, for the policy; tests use a fake one.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, whichever comes first.
	Sleep(ctx context.Context, d time.Duration) error
	// Random is uniform in [0, 1), for the jitter.
	Random() float64
}

type realClock struct{}

func (realClock) Now() time.Time  { return time.Now() }
func (realClock) Random() float64 { return rand.Float64() }
func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attempt is what one request came back with.
type attempt struct {
	status     int
	code       string // the problem's code, if the answer is a problem
	header     http.Header
	body       []byte
	err        error  // transport error
	sent       bool   // the request's headers were written: the gateway may act on it
	note       string // what reconciliation found, in words
	asked      bool   // the gateway answered a lookup by key
	found      bool   // and it holds an operation under the key
	lookupErr  error  // the lookup by key failed: the gateway could not say
	expired    bool   // the gateway no longer holds it, or may have purged it
	retryAfter time.Duration
	approval   *ApprovalInfo // the approval the answer (202) or the lookup named
	accepted   string        // a 202's code: approval_required or approval_expired
}

// delivery is what the attempt tells of whether its request reached the
// gateway.
func (a attempt) delivery() Sent {
	switch {
	case a.found:
		return SentYes
	case a.asked: // the gateway holds nothing under the key
		return SentNo
	case a.err != nil && !a.sent:
		return SentNo
	case a.err != nil || a.status == 0:
		return SentMaybe
	}
	return SentYes
}

// step is what the policy makes of an attempt.
type step int

const (
	stepDone       step = iota // the outcome is final for this call
	stepRetry                  // send again, same key, after the delay
	stepReconcile              // the answer was lost after sending: ask the gateway by key
	stepWaitStatus             // still executing: send again (Prefer: wait) after the delay
	stepAsk                    // the gateway could not say: ask it again, send nothing
	// stepWaitApproval: a human has not decided yet; send again (same key,
	// Prefer: wait for the decision) while Policy.ApprovalWait lasts.
	stepWaitApproval
)

// decide is the workflow article's table of error families.
func decide(a attempt) (step, Kind) {
	replayed := a.err == nil && a.header.Get(contract.HeaderReplayed) == "true"
	switch {
	case a.err != nil && !a.sent:
		return stepRetry, Failed // connection refused: nothing reached the gateway
	case a.err != nil:
		return stepReconcile, Unknown // timeout or reset after sending: never blind
	case transient(a):
		return stepRetry, Failed // "not now", nothing applied: the same key makes the retry safe
	case a.code == contract.CodeInProgress:
		return stepWaitStatus, InProgress
	case a.code == contract.CodeOutcomeUnknown:
		return stepDone, Unknown
	case a.code == contract.CodeFingerprintMismatch:
		return stepDone, Conflict
	case a.code == contract.CodeApprovalDenied:
		return stepDone, Failed
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
		return stepDone, Unauthorized
	case a.status == http.StatusAccepted && a.approval != nil:
		// The gateway's own 202 names the approval it waits for; an
		// upstream's 202 (accepted for processing) is its answer.
		return stepDone, NeedsApproval
	case a.status >= 200 && a.status < 300 && replayed:
		return stepDone, Replayed
	case a.status >= 200 && a.status < 300:
		return stepDone, Created
	case a.status >= 400 && a.status < 500:
		return stepDone, Rejected
	case replayed: // a stored 5xx the route declares final: it will not change
		return stepDone, Failed
	}
	// Any other 5xx: the upstream's own error passed through (the gateway
	// then holds the operation unknown), or a proxy in front of the
	// gateway. Either way, ask before sending again.
	return stepReconcile, Unknown
}

// transient says an answer means "not now" and nothing was applied: a
// rate limit (the upstream's, or the gateway's own rate_limited), a
// gateway that could not reserve or reach the upstream, a concurrency
// group another operation holds, or an upstream's 408/409/425 the gateway
// released. It tells nothing of an operation an earlier attempt may have
// started, so it is not recorded over what the journal knows.
func transient(a attempt) bool {
	switch {
	case a.err != nil:
		return !a.sent
	case a.code == contract.CodeStoreUnavailable, a.code == contract.CodeUpstreamUnavailable, a.code == contract.CodeRateLimited,
		a.code == contract.CodeConcurrencyLocked:
		return true
	case a.code != "" || a.header.Get(contract.HeaderReplayed) == "true":
		return false
	}
	switch a.status {
	case http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly:
		return true
	}
	return false
}

// retryAfter reads Retry-After in seconds (the gateway's form) or as a date.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// reason says in words what a try came to.
func (a attempt) reason() string {
	first := ""
	switch {
	case a.err != nil && a.sent:
		first = "the answer was lost (" + cause(a.err) + ")"
	case a.err != nil:
		return "gateway unreachable: " + cause(a.err)
	case a.status == http.StatusAccepted && a.approval != nil && a.note == "" && a.lookupErr == nil:
		return acceptedReason(a.status, a.accepted, a.approval)
	case a.status > 0 && a.note == "" && a.lookupErr == nil:
		return a.answer()
	case a.status > 0:
		first = a.answer()
	}
	if a.lookupErr != nil {
		return join(first, "the gateway could not be asked what became of it ("+cause(a.lookupErr)+")")
	}
	return join(first, a.note)
}

// answer says in words what came back: the status, and a problem's code
// and detail.
func (a attempt) answer() string {
	var p struct{ Detail string }
	if a.code != "" {
		_ = json.Unmarshal(a.body, &p)
	}
	s := fmt.Sprintf("answered %d", a.status)
	if a.header.Get(contract.HeaderReplayed) == "true" {
		s = fmt.Sprintf("the gateway replayed the stored answer, %d", a.status)
	}
	if a.code != "" {
		s += " " + a.code
	}
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	if a.retryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", a.retryAfter)
	}
	return s
}

// cause names a transport error in a few words, without the URL.
func cause(err error) string {
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dns):
		return "cannot resolve " + dns.Name
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection closed without an answer"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	}
	for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(err) {
		err = u
	}
	return err.Error()
}

func join(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}
