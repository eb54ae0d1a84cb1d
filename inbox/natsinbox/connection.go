package natsinbox

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// events are the connection's handlers. nats.go reconnects by itself,
// under an iterator that sees nothing of it: here the log says when the
// broker is lost and found again, and the observer hears each change.
func (r *runner) events() []nats.Option {
	return []nats.Option{
		nats.ConnectHandler(func(*nats.Conn) { r.report() }),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			r.report()
			if nc.IsClosed() { // Run closed it: a stop, not an interruption
				return
			}
			why := "the connection was lost"
			if err != nil {
				why = err.Error()
			}
			r.src.Logger.Warn("consumer interrupted; trying again", slog.String("consumer", r.c.Name),
				slog.String("server", r.server), slog.String("error", why))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			r.report()
			r.src.Logger.Info("consumer reconnected", slog.String("consumer", r.c.Name),
				slog.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.ClosedHandler(func(*nats.Conn) { r.report(); close(r.closed) }),
	}
}

// consuming holds end as the running session's (endSession ends it) and
// reports the consumer up; done reports it down.
func (r *runner) consuming(end context.CancelCauseFunc) (done func()) {
	r.mu.Lock()
	r.end = end
	r.mu.Unlock()
	r.report()
	return func() {
		r.mu.Lock()
		r.end = nil
		r.mu.Unlock()
		r.report()
	}
}

// endSession ends the running session, if any, with cause: the next one
// starts with its checks.
func (r *runner) endSession(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.end != nil {
		r.end(cause)
	}
}

// report tells the observer whether the consumer is up: connected, with
// a session consuming. Reports are computed and made one at a time, so
// the last one made says the last state.
func (r *runner) report() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.src.Observer.Connected(r.c.Name, r.end != nil && r.nc != nil && r.nc.IsConnected())
}

// rechecks checks the dead letter again each time Recheck says so (a
// reload): one that became unusable ends the session, as it would at
// start-up. The group is done once ctx has ended.
func (r *runner) rechecks(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.src.Recheck:
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := r.deadLetterCaptured(cctx)
			cancel()
			if u := (*unusableError)(nil); errors.As(err, &u) {
				r.src.Logger.Error("dead letter unusable; consuming stops", slog.String("consumer", r.c.Name),
					slog.String("error", err.Error()))
				r.endSession(err)
			}
		}
	})
	return &wg
}

// redacted is a server URL, or a list of them, without passwords, for the
// logs.
func redacted(raw string) string {
	var out []string
	for _, one := range strings.Split(raw, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil {
			out = append(out, "the server")
			continue
		}
		out = append(out, u.Redacted())
	}
	return strings.Join(out, ",")
}
