package inbox

import (
	"context"
	"log/slog"
	"time"
)

// Sessions runs session until ctx ends, and again after each failure: a
// broker that is down or restarting is waited for, 250ms doubling to 5s
// between attempts (from 250ms again after a session that ended without
// an error), each failure logged for consumer name. It is every broker
// adapter's reconnection.
func Sessions(ctx context.Context, name string, log *slog.Logger, session func(context.Context) error) {
	for wait := 250 * time.Millisecond; ctx.Err() == nil; wait = min(2*wait, 5*time.Second) {
		if err := session(ctx); err != nil && ctx.Err() == nil {
			log.Warn("consumer interrupted; trying again", slog.String("consumer", name),
				slog.String("error", err.Error()), slog.Duration("in", wait))
		} else {
			wait = 250 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}
