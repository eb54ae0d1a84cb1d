package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/resultref"
	"github.com/idemgate/idemgate/ledger"
)

// Target is where a relay delivers the effects that name it.
type Target struct {
	// URL is the target's base: an effect's path (and query) is appended.
	URL string
	// Header is added to every delivery, over the effect's own: the
	// target's credentials live here, in the relay's configuration, and
	// never in the store.
	Header http.Header
	// Timeout bounds one delivery (10s). It must be shorter than the
	// relay's lease, so that no delivery outlives its claim.
	Timeout time.Duration
	// ResultRef names where the target's answer holds its reference for
	// the effect: "body:/id" or "header:X-Request-Id".
	ResultRef string
	// KeyHeader is the header the derived key goes in (Idempotency-Key).
	KeyHeader string
	// Sender, if set, delivers the effects instead of an HTTP call (URL,
	// Header, ResultRef and KeyHeader are then unused): a broker, such as
	// JetStream for a target named nats:SUBJECT (inbox/natsinbox).
	Sender Sender
}

// A Sender delivers an effect by other means than HTTP, with its derived
// key (ledger.UpstreamKey of its tenant and key), and says what came of
// it as a delivery's outcome: Succeeded once the broker has it, Prepared
// when nothing was sent, Unknown when it may have been.
type Sender interface {
	Send(ctx context.Context, e *ledger.Effect, key string) ledger.EffectOutcome
}

// Store is what a relay drives: a store's claims of due effects, and its
// turns (their results, and the next claim). A ledger.Store is one.
type Store interface {
	ClaimEffects(ctx context.Context, p ledger.EffectClaimParams) ([]ledger.EffectClaim, error)
	SettleEffects(ctx context.Context, p ledger.EffectSettle) (ledger.EffectSettled, error)
}

var _ Store = ledger.Store(nil)

// Relay delivers due effects to their targets, each claim leased and
// fenced by the store: several relays, in several processes, share the
// work and never deliver one effect at the same moment. A delivery's
// outcome follows docs/design.md's error families: 2xx succeeded; 3xx and 4xx
// failed (final), except 408, 409, 425 and 429, not applied (due again, after
// Retry-After if longer than the backoff); not reached, nothing sent: not
// applied; sent and no answer (a timeout, a reset), or 5xx: unknown, sent
// again with the same key after the backoff. After MaxAttempts a delivery
// that is still not final is parked for an operator.
type Relay struct {
	Store   Store
	Targets map[string]Target
	// Lease is how long a claim is the relay's alone: a relay that dies
	// holding one leaves the effect to another once it lapses. Default:
	// 30s, or twice the longest target timeout if that is more. A
	// delivery never runs past its claim's lease less a margin (a tenth of
	// it, 1s at least), counted from before the claim was asked for: one
	// that could not finish within it is not sent.
	Lease time.Duration
	// Every is how long the relay waits when nothing was due (1s).
	Every time.Duration
	// Concurrency is how many deliveries run at once (16), and so how many
	// effects a round claims: every claimed delivery starts at once, none
	// waits in a queue while its lease runs out (a lease that lapsed
	// before its delivery began would let another relay deliver it too).
	Concurrency int
	// MaxAttempts bounds the deliveries of one effect (10); 0 takes the
	// default, a negative value means no bound.
	MaxAttempts int
	// Backoff is how long after its attempt-th delivery an effect that is
	// not final is due again (default: 1s doubling to 5 min, ±20%).
	Backoff func(attempt int) time.Duration
	// Client sends the deliveries (default: a client of its own, which
	// follows no redirect: a redirect is an answer, and a failure). One
	// given here should not follow them either.
	Client *http.Client
	Logger *slog.Logger
	// OnDelivery, if set, hears every delivery once its turn has recorded
	// it (for metrics, and for tests). It runs on Run's goroutine: a slow
	// one holds up the next turn.
	OnDelivery func(Delivery)
	// Now is the relay's clock, which its deadlines are counted on
	// (default time.Now): a test steps it instead of waiting for time to
	// pass.
	Now func() time.Time

	once      sync.Once
	err       error
	targets   map[string]*target
	names     []string
	leaseTime time.Duration
}

// Delivery is one delivery as OnDelivery hears it.
type Delivery struct {
	Effect   *ledger.Effect // as claimed: executing, its attempt counted
	Outcome  ledger.EffectOutcome
	Duration time.Duration // from its start to its result's turn
	// Recorded is the store's answer to recording the outcome:
	// ledger.ErrStaleOwner when a later claim fenced this one.
	Recorded error
}

// Round is what one round did.
type Round struct {
	Claimed, Succeeded, Failed, Released, Unknown, Parked int
	// Fenced counts outcomes the store refused: a later claim took the
	// effect after this relay's lease lapsed.
	Fenced int
}

// Plus is the two rounds' counts added up.
func (r Round) Plus(o Round) Round {
	return Round{Claimed: r.Claimed + o.Claimed, Succeeded: r.Succeeded + o.Succeeded, Failed: r.Failed + o.Failed,
		Released: r.Released + o.Released, Unknown: r.Unknown + o.Unknown, Parked: r.Parked + o.Parked,
		Fenced: r.Fenced + o.Fenced}
}

func (r *Round) add(o ledger.EffectOutcome, recorded error) {
	switch {
	case errors.Is(recorded, ledger.ErrStaleOwner), errors.Is(recorded, ledger.ErrIllegalTransition):
		r.Fenced++
		return
	case recorded != nil:
		return
	case o.State == ledger.Succeeded:
		r.Succeeded++
	case o.State == ledger.Failed:
		r.Failed++
	case o.Park:
		r.Parked++
	case o.State == ledger.Prepared:
		r.Released++
	default:
		r.Unknown++
	}
}

// wait is how long Run waits for a place or for work: Every, doubled after
// each failed claim up to a minute.
func (r *Relay) wait(failures int) time.Duration {
	every := cmpOr(r.Every, time.Second)
	return min(every<<min(failures, 6), max(every, time.Minute))
}

// claimed is a claim and the moment its delivery must be over: the
// lease, less the margin, from before the claim was asked for (the store
// started the lease at some moment after that).
type claimed struct {
	ledger.EffectClaim
	deadline time.Time
}

// delivered is a delivery that ended, with its outcome, to be recorded.
type delivered struct {
	claimed
	outcome ledger.EffectOutcome
	start   time.Time
}

// turn records the outcomes of ds and claims up to free effects, in one
// transaction, and returns the claims and each result's answer. Its
// results are recorded even as the relay stops: the store is given a
// lease's length, past which they would be refused anyway (another relay
// may hold the effects by then). A turn that failed may still have
// committed (its reply lost): recording the same results again is no
// error.
func (r *Relay) turn(ctx context.Context, ds []delivered, free int) ([]claimed, []error, error) {
	if len(ds) == 0 && (free == 0 || ctx.Err() != nil) {
		return nil, nil, nil
	}
	p := ledger.EffectSettle{Results: make([]ledger.EffectResult, len(ds))}
	for i, d := range ds {
		p.Results[i] = ledger.EffectResult{Lease: d.Lease, Outcome: d.outcome}
	}
	if free > 0 && ctx.Err() == nil {
		p.Claim = r.claimParams(free)
	}
	deadline := r.now().Add(r.lease() - margin(r.lease()))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lease())
	defer cancel()
	out, err := r.Store.SettleEffects(sctx, p)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("settle effects: %w", err)
	case len(out.Recorded) != len(ds):
		return nil, nil, fmt.Errorf("settle effects: %d answers for %d results", len(out.Recorded), len(ds))
	}
	claims := make([]claimed, len(out.Claims))
	for i, c := range out.Claims {
		claims[i] = claimed{c, deadline}
	}
	return claims, out.Recorded, nil
}

// reportTurn reports each delivery of a turn: its own answer, or the
// turn's error.
func (r *Relay) reportTurn(ds []delivered, recorded []error, err error) {
	for i, d := range ds {
		if err == nil {
			r.report(d, recorded[i])
		} else {
			r.report(d, err)
		}
	}
}

func (r *Relay) claimParams(n int) ledger.EffectClaimParams {
	return ledger.EffectClaimParams{Targets: r.names, Limit: n, Lease: r.lease(), MaxAttempts: r.maxAttempts()}
}

// claim claims up to n effects due.
func (r *Relay) claim(ctx context.Context, n int) ([]claimed, error) {
	deadline := r.now().Add(r.lease() - margin(r.lease()))
	claims, err := r.Store.ClaimEffects(ctx, r.claimParams(n))
	if err != nil {
		return nil, fmt.Errorf("claim effects: %w", err)
	}
	out := make([]claimed, len(claims))
	for i, c := range claims {
		out[i] = claimed{c, deadline}
	}
	return out, nil
}

// margin is what a delivery leaves of its claim's lease: time for its
// result to be recorded (in the next turn, after the one at the store, if
// any), and for clocks to disagree.
func margin(lease time.Duration) time.Duration { return max(time.Second, lease/10) }

// Once claims up to Concurrency effects due, delivers them all at once,
// records their outcomes in one turn, and returns what the round did.
func (r *Relay) Once(ctx context.Context) (Round, error) {
	if err := r.compile(); err != nil {
		return Round{}, err
	}
	claims, err := r.claim(ctx, r.concurrency())
	if err != nil {
		return Round{}, err
	}
	ds := make([]delivered, len(claims))
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Detached: a relay that is stopping still records what it
			// sent, or the effect waits for its lease to lapse.
			ds[i] = r.deliver(context.WithoutCancel(ctx), c)
		}()
	}
	wg.Wait()
	round := Round{Claimed: len(claims)}
	if len(ds) == 0 {
		return round, nil
	}
	_, recorded, err := r.turn(context.WithoutCancel(ctx), ds, 0)
	r.reportTurn(ds, recorded, err)
	for i, d := range ds {
		if err == nil {
			round.add(d.outcome, recorded[i])
		} else {
			round.add(d.outcome, err)
		}
	}
	return round, nil
}

// deliver delivers one claimed effect. One that could not finish before
// its claim's deadline (the claim came back late) is not sent: it is
// recorded not applied, due again at once.
func (r *Relay) deliver(ctx context.Context, c claimed) delivered {
	d := delivered{claimed: c, start: r.now()}
	t := r.targets[c.Effect.Target]
	if c.deadline.Sub(r.now()) < t.Timeout {
		d.outcome = ledger.EffectOutcome{State: ledger.Prepared, ErrorCode: "lease_too_short"}
		return d
	}
	dctx, cancel := context.WithDeadline(ctx, c.deadline)
	d.outcome = t.deliver(dctx, r.client(), c.Effect)
	cancel()
	if !d.outcome.State.Final() {
		d.outcome.RetryIn, d.outcome.Park = r.retry(c.Effect.Attempts, d.outcome.RetryIn)
	}
	return d
}

// report logs a delivery whose outcome the store refused or did not
// record, and tells OnDelivery.
func (r *Relay) report(d delivered, recorded error) {
	switch {
	case errors.Is(recorded, ledger.ErrStaleOwner), errors.Is(recorded, ledger.ErrIllegalTransition):
		r.log().Warn("delivery fenced: another claim took the effect", "effect", d.Effect.ID, "err", recorded)
	case recorded != nil:
		// The lease will lapse, and the effect be sent again: at least once.
		r.log().Error("delivery not recorded", "effect", d.Effect.ID, "state", d.outcome.State, "err", recorded)
	}
	if r.OnDelivery != nil {
		r.OnDelivery(Delivery{Effect: d.Effect, Outcome: d.outcome, Duration: r.now().Sub(d.start), Recorded: recorded})
	}
}

// retry is when an effect whose attempt-th delivery was not final is due
// again: after the backoff, or the target's Retry-After (after) if longer;
// parked, once it used its attempts.
func (r *Relay) retry(attempt int, after time.Duration) (time.Duration, bool) {
	if max := r.maxAttempts(); max > 0 && attempt >= max {
		return 0, true
	}
	backoff := r.Backoff
	if backoff == nil {
		backoff = DefaultBackoff
	}
	return max(backoff(attempt), after), false
}

// DefaultBackoff waits 1s after the first delivery, doubling to 5 min,
// within ±20% so that effects that failed together spread out.
func DefaultBackoff(attempt int) time.Duration {
	d := min(time.Second<<min(max(attempt-1, 0), 20), 5*time.Minute)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// compile checks the relay's settings once, before its first round.
func (r *Relay) compile() error {
	r.once.Do(func() {
		longest := time.Duration(0)
		for _, t := range r.Targets {
			longest = max(longest, cmpOr(t.Timeout, defaultTimeout))
		}
		r.leaseTime = cmpOr(r.Lease, max(30*time.Second, 2*longest))
		r.targets = map[string]*target{}
		for name, t := range r.Targets {
			ct, err := compileTarget(name, t, r.leaseTime)
			if err != nil {
				r.err = err
				return
			}
			r.targets[name], r.names = ct, append(r.names, name)
		}
		slices.Sort(r.names)
		if r.Store == nil || len(r.names) == 0 {
			r.err = errors.New("outbox relay: a store and at least one target are needed")
		}
	})
	return r.err
}

func (r *Relay) lease() time.Duration { return r.leaseTime }

// now reads the relay's clock.
func (r *Relay) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Relay) concurrency() int { return max(cmpOr(r.Concurrency, 16), 1) }

func (r *Relay) maxAttempts() int {
	switch {
	case r.MaxAttempts < 0:
		return 0
	case r.MaxAttempts == 0:
		return 10
	}
	return r.MaxAttempts
}

func (r *Relay) client() *http.Client {
	if r.Client != nil {
		return r.Client
	}
	return defaultClient
}

var defaultClient = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

func (r *Relay) log() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

// defaultTimeout bounds a delivery whose target sets no timeout.
const defaultTimeout = 10 * time.Second

// target is a Target checked and ready.
type target struct {
	Target
	base      string
	resultRef resultref.Reader
}

func compileTarget(name string, t Target, lease time.Duration) (*target, error) {
	u, err := url.Parse(t.URL)
	if t.Sender == nil && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return nil, fmt.Errorf("outbox target %q: url %q: want http(s)://host[:port][/base]", name, t.URL)
	}
	ct := &target{Target: t, base: strings.TrimSuffix(t.URL, "/")}
	ct.Timeout = cmpOr(t.Timeout, defaultTimeout)
	// A delivery must fit in the lease with its margin, and with as much
	// again for the claim to come back.
	if ct.Timeout+2*margin(lease) > lease {
		return nil, fmt.Errorf("outbox target %q: timeout %v and twice a margin of %v do not fit in the lease %v",
			name, ct.Timeout, margin(lease), lease)
	}
	ct.KeyHeader = cmpOr(t.KeyHeader, contract.HeaderKey)
	if ct.resultRef, err = resultref.Compile(t.ResultRef); err != nil {
		return nil, fmt.Errorf("outbox target %q: %w", name, err)
	}
	return ct, nil
}

func cmpOr[T comparable](v, fallback T) T {
	var zero T
	if v == zero {
		return fallback
	}
	return v
}
