// Package maintain is the maintenance plane (docs/design.md, "Layout"):
// the work a store needs beside the requests that write it. The lease
// expiry sweep (an executing operation whose owner is gone becomes
// unknown, never free), the approval expiry sweep (an expired approval
// frees its operation's concurrency group), the retention purge, and,
// when given, the audit sealer and the reconciler.
//
// The gateway runs it, and so should a Go service that uses httpidem or
// outbox as a library: without it, leases never lapse into unknown and
// nothing is ever purged. Every instance sharing a store may run it at
// once: the stores make each job safe to run concurrently (a lapsed lease
// is expired once, a row purged once, one sealer holds the log at a time,
// each unknown operation has one prober at a time).
package maintain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemgate/idemgate/audit"
)

// Store is what the maintenance plane drives: a store's sweeps and its
// purge. A ledger.Store is one.
type Store interface {
	// ExpireLeases makes up to limit lapsed executing operations unknown.
	ExpireLeases(ctx context.Context, limit int) (int, error)
	// ExpireApprovals expires up to limit approvals past their time.
	ExpireApprovals(ctx context.Context, limit int) (int, error)
	// Purge deletes up to limit operations, and final effects, past their
	// retention.
	Purge(ctx context.Context, limit int) (int, error)
}

// Reconciler probes unknown operations (package reconcile's Reconciler is
// one): Once probes those due, once each; Run probes until ctx ends,
// looking every interval; Probing says whether it has any probe at all
// (one that has none is not run). An interface, so that a service that
// never probes links no CEL.
type Reconciler interface {
	Once(ctx context.Context) (int, error)
	Run(ctx context.Context, every time.Duration)
	Probing() bool
}

// Options configure the maintenance plane. The zero value runs the
// sweeps and the purge at their default paces, and nothing else.
type Options struct {
	// SweepInterval paces the lease and approval expiry sweeps (1s);
	// PurgeInterval the retention purge (1m). Each run is jittered (-10%
	// to +10%), so that instances started together do not sweep in step.
	// A negative interval leaves that job out (a one-shot reconciliation
	// purges nothing).
	SweepInterval time.Duration
	PurgeInterval time.Duration
	// Sealer, if set, seals the audit log until the context ends, then
	// once more, bounded by ShutdownTimeout, so that a service stopped
	// gracefully leaves its events sealed. Its Log (and its Logger, for
	// its rounds' failures) are the caller's to set.
	Sealer *audit.Sealer
	// ShutdownTimeout bounds that final seal (20s).
	ShutdownTimeout time.Duration
	// Reconciler, if set and probing, probes unknown operations every
	// second (each operation at its route's own pace). One without probes
	// is not run. Its Store (and its Logger) are the caller's to set.
	Reconciler Reconciler
	// Logger hears the sweeps' and the purge's failures, and what a run
	// did when it did anything, and the final seal's failure (nil:
	// nothing is logged).
	Logger *slog.Logger
	// OnLeasesExpired, OnApprovalsExpired and OnPurged, if set, hear how
	// many operations a run expired or purged, when any (for metrics).
	// Each is called from one goroutine at a time.
	OnLeasesExpired    func(n int)
	OnApprovalsExpired func(n int)
	OnPurged           func(n int)
	// Flush, if set, is called once every job has stopped and before the
	// sealer's final seal: the caller's audit batcher (ledger.EventBatcher)
	// writes what it holds, so that a service stopped gracefully leaves
	// every event sealed. Once calls it before its seal.
	Flush func()
}

// Batch sizes of the sweeps and the purge: small enough that one
// statement never holds many rows, large enough to keep up.
const (
	sweepBatch = 100
	purgeBatch = 500
)

// reconcileEvery is how often the reconciler looks for due probes; each
// operation's own pace is its route's `every`.
const reconcileEvery = time.Second

// job is one of the plane's jobs: pass runs it once to completion; run,
// until ctx ends; last, if set, once every job has stopped and Flush has
// been called (the sealer's final seal).
type job struct {
	name string
	pass func(ctx context.Context) (int, error)
	run  func(ctx context.Context)
	last func(ctx context.Context)
}

// Run runs the jobs until ctx ends, and returns once all have stopped.
// It stops in an order that leaves nothing behind: every job first (the
// reconciler records no more events), then Flush (the caller's audit
// batcher writes what it holds), then the sealer's final seal, which so
// covers every event. Close the store after it returns. s is required.
func Run(ctx context.Context, s Store, o Options) {
	jobs := o.jobs(s)
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { j.run(ctx) })
	}
	wg.Wait()
	if o.Flush != nil {
		o.Flush()
	}
	for _, j := range jobs {
		if j.last != nil {
			j.last(ctx)
		}
	}
}

// Counts is what Once did.
type Counts struct {
	LeasesExpired, ApprovalsExpired, Purged int
	Sealed                                  int // audit events sealed
	Settled                                 int // unknown operations the reconciler settled
}

// Once runs each job once to completion, one after the other: the
// sweeps (so that lapsed leases are unknown before the reconciler
// looks), the reconciler, the purge, Flush, then the sealer (which seals
// what they recorded). A job that fails does not stop the next; the error
// joins every job's.
func Once(ctx context.Context, s Store, o Options) (Counts, error) {
	var c Counts
	counts := map[string]*int{jobLeases: &c.LeasesExpired, jobApprovals: &c.ApprovalsExpired,
		jobReconcile: &c.Settled, jobPurge: &c.Purged, jobSeal: &c.Sealed}
	var errs []error
	for _, j := range o.jobs(s) {
		if j.name == jobSeal && o.Flush != nil {
			o.Flush()
		}
		n, err := j.pass(ctx)
		*counts[j.name] = n
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", j.name, err))
		}
	}
	return c, errors.Join(errs...)
}

// The jobs' names, as logged.
const (
	jobLeases    = "expire leases"
	jobApprovals = "expire approvals"
	jobReconcile = "reconcile"
	jobPurge     = "purge"
	jobSeal      = "seal audit log"
)

// jobs lists the jobs o asks for, in Once's order.
func (o Options) jobs(s Store) []job {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sweep := func(name string, d time.Duration, batch int, step func(context.Context, int) (int, error),
		hook func(int)) job {
		pass := func(ctx context.Context) (int, error) {
			n, err := drain(ctx, batch, step)
			if n > 0 && hook != nil {
				hook(n)
			}
			return n, err
		}
		return job{name: name, pass: pass, run: func(ctx context.Context) { every(ctx, log, d, name, pass) }}
	}
	var jobs []job
	if o.SweepInterval >= 0 {
		jobs = append(jobs,
			sweep(jobLeases, or(o.SweepInterval, time.Second), sweepBatch, s.ExpireLeases, o.OnLeasesExpired),
			sweep(jobApprovals, or(o.SweepInterval, time.Second), sweepBatch, s.ExpireApprovals, o.OnApprovalsExpired))
	}
	if r := o.Reconciler; r != nil && r.Probing() {
		jobs = append(jobs, job{name: jobReconcile,
			pass: func(ctx context.Context) (int, error) { return untilNone(ctx, r.Once) },
			run:  func(ctx context.Context) { r.Run(ctx, reconcileEvery) }})
	}
	if o.PurgeInterval >= 0 {
		jobs = append(jobs, sweep(jobPurge, or(o.PurgeInterval, time.Minute), purgeBatch, s.Purge, o.OnPurged))
	}
	if sl := o.Sealer; sl != nil {
		shutdown := or(o.ShutdownTimeout, 20*time.Second)
		jobs = append(jobs, job{name: jobSeal,
			pass: func(ctx context.Context) (int, error) {
				if err := sl.SyncFile(ctx); err != nil {
					return 0, err
				}
				return untilNone(ctx, sl.Round)
			},
			// Sealer.Run logs its own failures; the final seal's are
			// logged here.
			run: sl.Run,
			last: func(ctx context.Context) {
				fin, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdown)
				defer cancel()
				if _, err := untilNone(fin, sl.Round); err != nil {
					log.LogAttrs(fin, slog.LevelError, "final seal", slog.String("error", err.Error()))
				}
			}})
	}
	return jobs
}

func or(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// drain runs a batch step until a batch comes back short.
func drain(ctx context.Context, batch int, step func(context.Context, int) (int, error)) (int, error) {
	total := 0
	for ctx.Err() == nil {
		n, err := step(ctx, batch)
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
	return total, ctx.Err()
}

// untilNone runs a round until one does nothing.
func untilNone(ctx context.Context, round func(context.Context) (int, error)) (int, error) {
	total := 0
	for {
		n, err := round(ctx)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// every runs fn at a jittered interval, so that instances started together
// do not sweep in lockstep.
func every(ctx context.Context, log *slog.Logger, d time.Duration, name string, fn func(context.Context) (int, error)) {
	for {
		jitter := time.Duration(rand.Int64N(int64(d)/5 + 1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d - d/10 + jitter):
		}
		n, err := fn(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			log.LogAttrs(ctx, slog.LevelError, name, slog.String("error", err.Error()))
		case n > 0:
			log.LogAttrs(ctx, slog.LevelInfo, name, slog.Int("operations", n))
		}
	}
}
