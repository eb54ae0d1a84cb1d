// Package natsinbox runs an inbox consumer (package inbox) on a NATS
// JetStream stream: a durable pull consumer, created if missing, with
// explicit acknowledgements and as many messages pending as the consumer's
// concurrency. It reconnects by itself when the server restarts. It also
// publishes an outbox's effects to JetStream (Publisher).
package natsinbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/keyed"
)

// Source is a JetStream consumer's settings.
type Source struct {
	URL      string
	Stream   string
	Consumer string // the durable consumer's name
	Subject  string // a filter within the stream, "" for all of it
	// DeadLetter is the subject parked messages are published to; a stream
	// other than the one consumed must capture it, or nothing is consumed.
	DeadLetter  string
	Concurrency int
	// Start is where the durable consumer starts when it is missing
	// (created for the first time, or lost, or renamed).
	Start inbox.Start
	// Now is the clock Start's "since" counts back from (time.Now); a
	// test sets it to place the start between two messages.
	Now func() time.Time
	// AckWait is how long the server waits for an acknowledgement before
	// it delivers a message again (default 30s); a delivery that takes
	// longer tells the server it is still in progress.
	AckWait time.Duration
	Logger  *slog.Logger
	// Observer hears of the parks and of the connection (nil: nothing).
	Observer inbox.Observer
	// Recheck, at each receive, has the dead letter checked again (the
	// server sends one at each reload): one that no stream captures stops
	// the consuming, as at start-up.
	Recheck <-chan struct{}
}

// startAt sets a new durable's delivery policy where s says, from now.
func startAt(s inbox.Start, cc *jetstream.ConsumerConfig, now time.Time) {
	switch {
	case s.All:
		cc.DeliverPolicy = jetstream.DeliverAllPolicy
	case s.New:
		cc.DeliverPolicy = jetstream.DeliverNewPolicy
	default:
		at := now.Add(-s.Since)
		cc.DeliverPolicy, cc.OptStartTime = jetstream.DeliverByStartTimePolicy, &at
	}
}

// Connect opens a connection that retries its first connection and
// reconnects for ever: a broker that is down at start-up or restarts is
// waited for, never a reason to stop.
func Connect(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(url, append([]nats.Option{nats.Name(name), nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second)}, opts...)...)
}

// Run consumes until ctx ends, each message handled by c; the messages in
// hand are finished before it returns.
func Run(ctx context.Context, src Source, c *inbox.Consumer) error {
	src.defaults()
	r := &runner{src: src, c: c, server: redacted(src.URL), sem: make(chan struct{}, src.Concurrency),
		closed: make(chan struct{})}
	nc, err := Connect(src.URL, "idemgate consumer "+c.Name, r.events()...)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", c.Name, err)
	}
	defer func() { nc.Close(); <-r.closed }() // the connection's handlers are done with r
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.nc, r.js = nc, js
	r.mu.Unlock()
	rechecks := r.rechecks(ctx)
	inbox.Sessions(ctx, c.Name, src.Logger, r.consume)
	r.wg.Wait()
	rechecks.Wait()
	return nil
}

func (s *Source) defaults() {
	if s.Concurrency <= 0 {
		s.Concurrency = 1
	}
	if s.AckWait <= 0 {
		s.AckWait = 30 * time.Second
	}
	if s.Start == (inbox.Start{}) {
		s.Start.Since = keyed.DefaultRetention
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Observer == nil {
		s.Observer = inbox.Unobserved{}
	}
}

// readAhead is the messages the server may hand the consumer before they
// are acknowledged (MaxAckPending, and each pull's size): inbox.ReadAhead.
// A message read ahead waits a handling's time at most, far within its
// AckWait.
func (s Source) readAhead() int { return inbox.ReadAhead(s.Concurrency) }

type runner struct {
	src Source
	c   *inbox.Consumer
	nc  *nats.Conn
	js  jetstream.JetStream
	sem chan struct{}
	wg  sync.WaitGroup
	// server is the source's URL without its password, for the logs.
	server string
	// mu guards nc while Run sets it (the connection's handlers may run
	// first) and end.
	mu sync.Mutex
	// end ends the running session with its cause; nil between sessions.
	end context.CancelCauseFunc
	// closed is closed by the connection's last handler.
	closed chan struct{}
}

// consumer is the durable consumer, created if missing, where Start
// says: the operator makes the stream, idemgate its own consumer.
func (r *runner) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := r.js.Consumer(ctx, r.src.Stream, r.src.Consumer)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return cons, err
	}
	cc := jetstream.ConsumerConfig{Durable: r.src.Consumer, AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: r.src.readAhead(), AckWait: r.src.AckWait, FilterSubject: r.src.Subject, MaxDeliver: -1,
		Description: "idemgate consumer " + r.c.Name}
	startAt(r.src.Start, &cc, r.src.Now())
	r.src.Logger.Warn("durable consumer missing: created", slog.String("consumer", r.c.Name),
		slog.String("durable", r.src.Consumer), slog.String("start", r.src.Start.String()))
	return r.js.CreateConsumer(ctx, r.src.Stream, cc)
}

// consume hands each message to a worker, at most Concurrency at once,
// until ctx ends, the iterator fails or the session is ended (endSession).
// It consumes nothing while no stream could confirm a park: a message it
// could not park would keep its slot for ever.
func (r *runner) consume(ctx context.Context) error {
	if !r.nc.IsConnected() { // the connection retries on its own meanwhile
		return fmt.Errorf("not connected to %s", r.server)
	}
	sctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	cctx, cancel := context.WithTimeout(sctx, 10*time.Second)
	err := r.deadLetterCaptured(cctx)
	var cons jetstream.Consumer
	if err == nil {
		cons, err = r.consumer(cctx)
	}
	cancel()
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(r.src.readAhead()), jetstream.PullHeartbeat(2*time.Second),
		jetstream.PullExpiry(pullExpiry))
	if err != nil {
		return err
	}
	defer it.Stop()
	defer r.consuming(end)()
	for {
		msg, err := it.Next(jetstream.NextContext(sctx))
		if err != nil {
			if sctx.Err() != nil && ctx.Err() == nil {
				return context.Cause(sctx)
			}
			return err
		}
		r.sem <- struct{}{}
		r.wg.Add(1)
		go func() {
			defer func() { <-r.sem; r.wg.Done() }()
			// Detached: a stopping consumer finishes what it holds.
			r.handle(context.WithoutCancel(ctx), msg)
		}()
	}
}

// pullExpiry bounds a pull request's life on the server. A session's
// last request outlives it there until it expires, and a message the
// server delivers to it meanwhile waits for its AckWait to come back.
const pullExpiry = 5 * time.Second

// handle runs one message and tells the server what became of it.
func (r *runner) handle(ctx context.Context, msg jetstream.Msg) {
	m := inbox.Message{Header: msg.Headers(), Body: msg.Data(), ContentType: msg.Headers().Get("Content-Type"),
		Deliveries: 1}
	md, err := msg.Metadata()
	if err == nil {
		m.Deliveries = int(md.NumDelivered)
	}
	stop := r.inProgress(msg)
	d := r.c.Handle(ctx, m)
	stop()
	switch d.Verdict {
	case inbox.Ack:
		err = msg.Ack()
	case inbox.Retry:
		err = msg.NakWithDelay(d.Delay)
	case inbox.Park:
		err = r.park(ctx, msg, md, d)
	}
	if err != nil {
		r.src.Logger.Warn("message left to be delivered again", slog.String("consumer", r.c.Name),
			slog.String("reason", d.Reason), slog.String("error", err.Error()))
	}
}

// inProgress tells the server, while a delivery runs longer than half its
// ack wait, that the message is not abandoned.
func (r *runner) inProgress(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(r.src.AckWait / 2)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() { close(done) }
}
