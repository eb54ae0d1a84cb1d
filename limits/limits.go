// Package limits keeps one tenant from taking what belongs to all: a
// request rate (a token bucket per tenant, golang.org/x/time/rate), a
// budget of live operations, of pending approvals, and of the bytes its
// operations and approvals hold. A request over
// them is refused before anything is reserved; the gateway answers 429
// rate_limited with Retry-After.
//
// The budgets are read from the store (ledger.Store.Usage), so that
// several gateway instances share them, at most every Resync per tenant,
// in the background once known; in between, each instance adds what it
// admitted and recorded itself. A budget can so be overshot by what other
// instances did since the last reading, and never by this one.
package limits

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/idemgate/idemgate/ledger"
)

// Policy is one tenant's limits. Zero fields are unlimited.
type Policy struct {
	Rate      rate.Limit // requests per second
	Burst     int        // requests allowed at once above the rate
	MaxLive   int64      // operations prepared, executing or unknown
	MaxStored int64      // bytes its operations and approvals hold (ledger.Usage.Stored)
	// MaxPending bounds its approvals pending at once: a new operation
	// that asks for one past it is refused.
	MaxPending int64
}

// Admission is what a new operation adds to its tenant's usage, as
// estimated before the store holds it.
type Admission struct {
	Bytes    int64 // ledger.OperationHeld, plus ledger.ApprovalHeld with an approval
	Approval bool  // it opens a pending approval
}

// Refusal is a request over a tenant's limits: why, and when a retry may
// pass.
type Refusal struct {
	Reason     string
	RetryAfter time.Duration
}

// Error says why.
func (r *Refusal) Error() string { return r.Reason }

// Options configure a Limiter.
type Options struct {
	// Usage reads what a tenant holds; ledger.Store.Usage.
	Usage func(ctx context.Context, tenant string) (ledger.Usage, error)
	// Policy returns a tenant's limits.
	Policy func(tenant string) Policy
	// Resync is how stale a tenant's usage may get (default 10s).
	Resync time.Duration
	// OnError hears a usage that could not be read; the request is then
	// admitted (the store that cannot answer Usage will refuse the
	// reservation itself).
	OnError func(tenant string, err error)
}

// Limiter enforces policies per tenant. Tenants come from authenticated
// principals, so the set it tracks is bounded by the configuration.
type Limiter struct {
	opts     Options
	mu       sync.Mutex
	tenants  map[string]*tenant
	now      func() time.Time
	failures *Failures
}

// New returns a Limiter.
func New(opts Options) *Limiter {
	if opts.Resync <= 0 {
		opts.Resync = 10 * time.Second
	}
	if opts.OnError == nil {
		opts.OnError = func(string, error) {}
	}
	return &Limiter{opts: opts, tenants: map[string]*tenant{}, now: time.Now,
		failures: NewFailures(failureEvery, failureBurst)}
}

// A client may fail failureBurst authentications at once, then one per
// failureEvery: tokens are long random secrets, so this costs a person
// who mistypes nothing, and keeps a guesser from using the gateway as a
// fast oracle.
const (
	failureEvery = 200 * time.Millisecond
	failureBurst = 20
)

// Failures is the limit of failed authentications per client, shared by
// every face that takes a token (the APIs, the web page's sign-in).
func (l *Limiter) Failures() *Failures { return l.failures }

// tenant is one tenant's rules and what it is known to hold.
type tenant struct {
	rules      atomic.Pointer[rules] // swapped whole by SetPolicy
	mu         sync.Mutex
	known      bool
	base       ledger.Usage // as the store last said
	readAt     time.Time
	added      ledger.Usage // what this instance admitted and recorded since
	refreshing bool
}

// rules are a tenant's policy and the bucket of its rate.
type rules struct {
	policy Policy
	bucket *rate.Limiter // nil: no rate limit
}

// rulesFor are the rules of p, keeping the tokens of the bucket a
// tenant had (old, nil for none): a new rate applies from now on, and
// what the tenant spent stays spent.
func rulesFor(p Policy, old *rate.Limiter) *rules {
	r := &rules{policy: p}
	switch {
	case p.Rate <= 0:
	case old != nil:
		old.SetLimit(p.Rate)
		old.SetBurst(max(p.Burst, 1))
		r.bucket = old
	default:
		r.bucket = rate.NewLimiter(p.Rate, max(p.Burst, 1))
	}
	return r
}

func (l *Limiter) tenant(name string) *tenant {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tenants[name]
	if t == nil {
		t = &tenant{}
		t.rules.Store(rulesFor(l.opts.Policy(name), nil))
		l.tenants[name] = t
	}
	return t
}

// SetPolicy replaces every tenant's limits (a configuration reloaded):
// requests from now on are held to the new ones. What the limiter knows
// survives: each tenant's bucket keeps its tokens (at the new rate and
// burst), its usage and what this instance admitted stay counted, and the
// failed authentications per client stay failed.
func (l *Limiter) SetPolicy(policy func(tenant string) Policy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.opts.Policy = policy
	for name, t := range l.tenants {
		t.rules.Store(rulesFor(policy(name), t.rules.Load().bucket))
	}
}

// Request takes one request from the tenant's rate, or says how long to
// wait for one.
func (l *Limiter) Request(tenantName string) *Refusal {
	ru := l.tenant(tenantName).rules.Load()
	if ru.bucket == nil || ru.bucket.Allow() {
		return nil
	}
	wait := time.Duration((1 - ru.bucket.Tokens()) / float64(ru.bucket.Limit()) * float64(time.Second))
	return &Refusal{Reason: fmt.Sprintf("tenant %s is over its request rate (%g/s, burst %d)", tenantName,
		float64(ru.policy.Rate), max(ru.policy.Burst, 1)), RetryAfter: max(wait, time.Second)}
}

// NewOperation admits one more operation of the tenant within its budgets,
// and counts it (live, its bytes, its pending approval), or refuses it.
// The caller calls settle once it knows whether the request created the
// operation and left it live: a reservation that created nothing counts
// no longer, and an operation already final no longer as live (the live
// budget is of operations not yet final, not of requests).
func (l *Limiter) NewOperation(ctx context.Context, tenantName string, a Admission) (settle func(created, live bool),
	r *Refusal) {
	t := l.tenant(tenantName)
	p := t.rules.Load().policy
	if !p.budgeted() {
		return noSettle, nil
	}
	l.refresh(ctx, tenantName, t)
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := p.over(tenantName, t, a, max(time.Second, l.opts.Resync-l.now().Sub(t.readAt))); r != nil {
		return nil, r
	}
	add := ledger.Usage{Live: 1, Stored: a.Bytes}
	if a.Approval {
		add.Pending = 1
	}
	t.added = plus(t.added, add)
	return func(created, live bool) {
		t.mu.Lock()
		defer t.mu.Unlock()
		switch {
		case !created: // also right across a read: see read
			t.added = plus(t.added, ledger.Usage{Live: -add.Live, Pending: -add.Pending, Stored: -add.Stored})
		case !live:
			t.added.Live--
		}
	}, nil
}

// budgeted reports whether the policy has any budget NewOperation counts.
func (p Policy) budgeted() bool { return p.MaxLive > 0 || p.MaxStored > 0 || p.MaxPending > 0 }

// over is the refusal of a admitted on top of what the tenant holds, or
// nil. The caller holds t.mu.
func (p Policy) over(name string, t *tenant, a Admission, retry time.Duration) *Refusal {
	held := plus(t.base, t.added)
	switch {
	case p.MaxLive > 0 && held.Live >= p.MaxLive:
		return &Refusal{Reason: fmt.Sprintf("tenant %s has %d operations not yet final, its limit", name, held.Live),
			RetryAfter: retry}
	case a.Approval && p.MaxPending > 0 && held.Pending >= p.MaxPending:
		return &Refusal{Reason: fmt.Sprintf("tenant %s has %d approvals pending, its limit", name, held.Pending),
			RetryAfter: retry}
	case p.MaxStored > 0 && held.Stored >= p.MaxStored:
		return &Refusal{Reason: fmt.Sprintf("tenant %s holds %d KiB of operations, answers and approvals, its "+
			"limit is %d KiB", name, held.Stored>>10, p.MaxStored>>10), RetryAfter: retry}
	}
	return nil
}

// plus is the sum of two usages.
func plus(a, b ledger.Usage) ledger.Usage {
	return ledger.Usage{Live: a.Live + b.Live, Pending: a.Pending + b.Pending, Stored: a.Stored + b.Stored}
}

func noSettle(bool, bool) {}

// Ended counts out an operation that was admitted live and has ended
// outside the request that admitted it: an action completed by its
// owner's step, whose reservation settled as live. Without it the
// tenant's budget would count the operation until the next read of its
// usage. (Counted out on another instance than the one that admitted it,
// it may under-count until that read: a budget is a bound kept within a
// read, not a lock.)
func (l *Limiter) Ended(tenantName string) {
	t := l.tenant(tenantName)
	if !t.rules.Load().policy.budgeted() {
		return // NewOperation counted nothing
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.added.Live--
}

// Stored counts a response this instance has just recorded for the tenant.
func (l *Limiter) Stored(tenantName string, bytes int64) {
	t := l.tenant(tenantName)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.added.Stored += bytes
}

// refresh reads the tenant's usage: now, the first time; in the
// background once it is stale.
func (l *Limiter) refresh(ctx context.Context, name string, t *tenant) {
	t.mu.Lock()
	known, stale := t.known, l.now().Sub(t.readAt) >= l.opts.Resync
	if known && (!stale || t.refreshing) {
		t.mu.Unlock()
		return
	}
	t.refreshing = true
	since := t.added
	t.mu.Unlock()
	if known {
		go l.read(context.WithoutCancel(ctx), name, t, since)
		return
	}
	l.read(ctx, name, t, since)
}

// read takes the store's word for the tenant's usage; what this instance
// added after since was not in it yet. An operation admitted before the
// read and settled after it is in the store's figure, and its settling
// takes it out again; one admitted and settled before it is in neither.
func (l *Limiter) read(ctx context.Context, name string, t *tenant, since ledger.Usage) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	at := l.now()
	u, err := l.opts.Usage(ctx, name)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refreshing = false
	if err != nil {
		l.opts.OnError(name, err)
		return
	}
	t.known, t.base, t.readAt = true, u, at
	t.added = plus(t.added, ledger.Usage{Live: -since.Live, Pending: -since.Pending, Stored: -since.Stored})
}

// ParseRate reads "100/s", "6000/m", "50/h" or a plain number per second.
func ParseRate(s string) (rate.Limit, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		unit = "s"
	}
	per := map[string]float64{"s": 1, "m": 60, "h": 3600}[unit]
	n, err := strconv.ParseFloat(num, 64)
	if err != nil || per == 0 || !(n >= 0) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("rate %q: want N/s, N/m or N/h with N >= 0", s)
	}
	return rate.Limit(n / per), nil
}
