package gateway

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Batch sizes of the background work: small enough that one statement
// never holds many rows, large enough to keep up.
const (
	sweepBatch = 100
	purgeBatch = 500
)

// RunBackground runs the lease and approval expiry sweeps and the retention
// purge until
// ctx ends. Every instance runs them all; the stores make them safe to run
// at once (each lapsed lease is expired once, each row purged once).
func (g *Gateway) RunBackground(ctx context.Context) {
	go g.runSealer(ctx)
	go g.runReconciler(ctx)
	go g.metrics.History().Run(ctx, 0)
	go g.every(ctx, g.cfg.SweepInterval, "expire leases", func(ctx context.Context) (int, error) {
		n, err := g.drain(ctx, sweepBatch, g.store.ExpireLeases)
		g.metrics.LeasesExpired(n)
		return n, err
	})
	// Expired approvals free their operations' concurrency groups.
	go g.every(ctx, g.cfg.SweepInterval, "expire approvals", func(ctx context.Context) (int, error) {
		n, err := g.drain(ctx, sweepBatch, g.store.ExpireApprovals)
		g.metrics.ApprovalsExpired(n)
		return n, err
	})
	g.every(ctx, g.cfg.PurgeInterval, "purge", func(ctx context.Context) (int, error) {
		return g.drain(ctx, purgeBatch, g.store.Purge)
	})
}

// drain runs a batch step until a batch comes back short.
func (g *Gateway) drain(ctx context.Context, batch int, step func(context.Context, int) (int, error)) (int, error) {
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

// every runs fn at a jittered interval, so that instances started together
// do not sweep in lockstep.
func (g *Gateway) every(ctx context.Context, d time.Duration, name string, fn func(context.Context) (int, error)) {
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
			g.log.LogAttrs(ctx, slog.LevelError, name, slog.String("error", err.Error()))
		case n > 0:
			g.log.LogAttrs(ctx, slog.LevelInfo, name, slog.Int("operations", n))
		}
	}
}
