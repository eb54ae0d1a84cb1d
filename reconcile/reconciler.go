package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Answer is a probe's answer as the upstream gave it.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// Store is what a reconciler drives: a store's claims of due probes, and
// their results. A ledger.Store is one.
type Store interface {
	ClaimProbes(ctx context.Context, p ledger.ProbeClaimParams) ([]ledger.ProbeClaim, error)
	ProbeResult(ctx context.Context, l ledger.ProbeLease, o ledger.ProbeOutcome) (*ledger.Operation, error)
}

var _ Store = ledger.Store(nil)

// Reconciler probes the unknown operations of the routes that declare a
// probe, one owner per operation at a time (the store's claims), and
// records each verdict with its evidence. Every gateway instance may run
// one: they share the work, and never probe one operation at once.
type Reconciler struct {
	Store Store
	// Probes are the routes' probes, by route ("POST /v1/x/{id}/capture").
	Probes map[string]*Probe
	// Send sends a probe to the route's upstream, with its credentials.
	Send func(ctx context.Context, route, method, target string) (Answer, error)
	// ResultRef reads the upstream's reference for the effect from an
	// applied probe's answer, as the route names it; nil for none.
	ResultRef func(route string, a Answer) string
	// Audit, if set, hears the probes that proved nothing (an answered
	// event with their evidence); the verdicts are transitions, recorded
	// by the store.
	Audit func(audit.Event)
	Lease time.Duration // a claim's lease (30s)
	Batch int           // claims per round (32)
	// Concurrency is how many probes of a round run at once (8): their
	// verdicts then share the store's commits.
	Concurrency int
	Logger      *slog.Logger
	Now         func() time.Time
}

// never is when a probe that gave up is due again: it waits for an
// operator, who resolves the operation.
var never = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

func (r *Reconciler) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

// Once claims the operations due and probes each; it returns how many it
// settled (applied or not applied).
func (r *Reconciler) Once(ctx context.Context) (int, error) {
	routes := make([]string, 0, len(r.Probes))
	for route := range r.Probes {
		routes = append(routes, route)
	}
	if len(routes) == 0 {
		return 0, nil
	}
	slices.Sort(routes)
	claims, err := r.Store.ClaimProbes(ctx, ledger.ProbeClaimParams{Routes: routes, Limit: cmpOr(r.Batch, 32),
		Lease: cmpOr(r.Lease, 30*time.Second)})
	if err != nil {
		return 0, fmt.Errorf("claim probes: %w", err)
	}
	var settled atomic.Int64
	var wg sync.WaitGroup
	work := make(chan ledger.ProbeClaim)
	for range min(cmpOr(r.Concurrency, 8), len(claims)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				if r.settleOne(ctx, c) {
					settled.Add(1)
				}
			}
		}()
	}
	for _, c := range claims {
		work <- c
	}
	close(work)
	wg.Wait()
	return int(settled.Load()), nil
}

// settleOne settles one claim and reports whether it left unknown.
func (r *Reconciler) settleOne(ctx context.Context, c ledger.ProbeClaim) bool {
	op, err := r.settle(ctx, c)
	switch {
	case errors.Is(err, ledger.ErrStaleOwner), errors.Is(err, ledger.ErrIllegalTransition):
		r.log(ctx, slog.LevelInfo, "probe result refused", c.Op.ID, err) // another settled it first
	case err != nil:
		r.log(ctx, slog.LevelError, "probe", c.Op.ID, err)
	default:
		return op.State.Final() || op.State == ledger.Prepared
	}
	return false
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// settle probes one claimed operation and records the verdict.
func (r *Reconciler) settle(ctx context.Context, c ledger.ProbeClaim) (*ledger.Operation, error) {
	p := r.Probes[c.Op.Route]
	now := r.now()
	switch {
	case c.Op.Probe == "":
		return r.again(ctx, c, never, "no probe request was rendered when it was reserved: it waits for an operator")
	case p.GaveUp(c.Op.UpdatedAt, now):
		return r.again(ctx, c, never, fmt.Sprintf("gave up: unknown for over %v, it waits for an operator", p.giveUp))
	}
	method, target, _ := strings.Cut(c.Op.Probe, " ")
	if err := p.checkRequest(method, target); err != nil {
		return r.again(ctx, c, never, fmt.Sprintf("the stored probe request %v: it waits for an operator", err))
	}
	ans, err := r.Send(ctx, c.Op.Route, method, target)
	if err != nil {
		return r.again(ctx, c, now.Add(p.Next(c.Lease.Probes)), fmt.Sprintf("probe %s failed: %v", c.Op.Probe, err))
	}
	v := p.Judge(ans.Status, ans.Header, ans.Body)
	evidence := fmt.Sprintf("probe %s answered %d: %s", c.Op.Probe, ans.Status, strings.ReplaceAll(string(v), "_", " "))
	if v == ledger.Inconclusive {
		return r.again(ctx, c, now.Add(p.Next(c.Lease.Probes)), evidence)
	}
	out := ledger.ProbeOutcome{Verdict: v, Evidence: evidence}
	if v == ledger.Applied {
		out.Response = reconciled(ans)
		if r.ResultRef != nil {
			out.ResultRef = r.ResultRef(c.Op.Route, ans)
		}
	}
	return r.Store.ProbeResult(ctx, c.Lease, out)
}

// reconciled is an applied probe's answer as the replay of its operation:
// its status, media type and body, marked Idempotency-Reconciled.
func reconciled(a Answer) *ledger.Response {
	h := http.Header{contract.HeaderReconciled: {"true"}}
	if ct := a.Header.Get("Content-Type"); ct != "" {
		h.Set("Content-Type", ct)
	}
	return &ledger.Response{Status: a.Status, Header: h, Body: a.Body}
}

// again ends an inconclusive probe's claim: due again at next.
func (r *Reconciler) again(ctx context.Context, c ledger.ProbeClaim, next time.Time, evidence string) (*ledger.Operation, error) {
	if r.Audit != nil {
		op := c.Op
		r.Audit(audit.Event{At: r.now(), Tenant: op.Tenant, OperationID: op.ID, Kind: audit.Answered,
			Principal: op.Principal, RunID: op.RunID, TraceID: op.TraceID, Key: op.Key, Fingerprint: op.Fingerprint,
			Route: op.Route, Target: op.Target, Actor: ledger.ActorReconciler, Reason: evidence})
	}
	return r.Store.ProbeResult(ctx, c.Lease, ledger.ProbeOutcome{Verdict: ledger.Inconclusive, Evidence: evidence,
		Next: next})
}

// Probing reports whether r has any probe to run: a reconciler without
// one is not run.
func (r *Reconciler) Probing() bool { return len(r.Probes) > 0 }

// Run reconciles every interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context, every time.Duration) {
	Every(ctx, every, r.Once, func(err error) { r.log(ctx, slog.LevelError, "reconcile", "", err) })
}

// Every runs once every interval until ctx ends, handing failed rounds
// to failed: Run's loop, for a caller whose reconciler changes between
// rounds (a server that reloads its configuration).
func Every(ctx context.Context, every time.Duration, once func(context.Context) (int, error), failed func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := once(ctx); err != nil && ctx.Err() == nil {
				failed(err)
			}
		}
	}
}

func (r *Reconciler) log(ctx context.Context, level slog.Level, msg, opID string, err error) {
	if r.Logger == nil {
		return
	}
	attrs := []slog.Attr{slog.String("error", err.Error())}
	if opID != "" {
		attrs = append(attrs, slog.String("operation_id", opID))
	}
	r.Logger.LogAttrs(ctx, level, msg, attrs...)
}
