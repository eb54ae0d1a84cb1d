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
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgate/idemgate/inbox"
)

// Source is a JetStream consumer's settings.
type Source struct {
	URL      string
	Stream   string
	Consumer string // the durable consumer's name
	Subject  string // a filter within the stream, "" for all of it
	// DeadLetter is the subject parked messages are published to; a stream
	// must capture it, or nothing is parked (the message is retried).
	DeadLetter  string
	Concurrency int
	// AckWait is how long the server waits for an acknowledgement before
	// it delivers a message again (default 30s); a delivery that takes
	// longer tells the server it is still in progress.
	AckWait time.Duration
	Logger  *slog.Logger
	// Observer hears of the parks and of the connection (nil: nothing).
	Observer inbox.Observer
}

// Connect opens a connection that retries its first connection and
// reconnects for ever: a broker that is down at start-up or restarts is
// waited for, never a reason to stop.
func Connect(url, name string) (*nats.Conn, error) {
	return nats.Connect(url, nats.Name(name), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond), nats.ReconnectJitter(100*time.Millisecond, time.Second))
}

// Run consumes until ctx ends, each message handled by c; the messages in
// hand are finished before it returns.
func Run(ctx context.Context, src Source, c *inbox.Consumer) error {
	src.defaults()
	nc, err := Connect(src.URL, "idemgate consumer "+c.Name)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", c.Name, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	r := &runner{src: src, c: c, nc: nc, js: js, sem: make(chan struct{}, src.Concurrency)}
	inbox.Sessions(ctx, c.Name, src.Logger, r.consume)
	r.wg.Wait()
	return nil
}

func (s *Source) defaults() {
	if s.Concurrency <= 0 {
		s.Concurrency = 1
	}
	if s.AckWait <= 0 {
		s.AckWait = 30 * time.Second
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Observer == nil {
		s.Observer = inbox.Unobserved{}
	}
}

type runner struct {
	src Source
	c   *inbox.Consumer
	nc  *nats.Conn
	js  jetstream.JetStream
	sem chan struct{}
	wg  sync.WaitGroup
}

// consumer is the durable consumer, created if missing: the operator
// makes the stream, idemgate its own consumer.
func (r *runner) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := r.js.Consumer(ctx, r.src.Stream, r.src.Consumer)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return cons, err
	}
	return r.js.CreateConsumer(ctx, r.src.Stream, jetstream.ConsumerConfig{Durable: r.src.Consumer,
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: r.src.Concurrency, AckWait: r.src.AckWait,
		FilterSubject: r.src.Subject, MaxDeliver: -1, DeliverPolicy: jetstream.DeliverAllPolicy,
		Description: "idemgate consumer " + r.c.Name})
}

// consume hands each message to a worker, at most Concurrency at once,
// until ctx ends or the iterator fails.
func (r *runner) consume(ctx context.Context) error {
	if !r.nc.IsConnected() { // the connection retries on its own meanwhile
		return fmt.Errorf("not connected to %s", redacted(r.nc.Opts.Url))
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cons, err := r.consumer(cctx)
	cancel()
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(r.src.Concurrency), jetstream.PullHeartbeat(2*time.Second))
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
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

// Headers a park sets on the dead letter's copy, so that it says which
// message it was: the copy's own Nats-Msg-Id is the park's.
const (
	OriginalMsgIDHeader    = "Idemgate-Original-Msg-Id"
	OriginalSubjectHeader  = "Idemgate-Original-Subject"
	OriginalStreamHeader   = "Idemgate-Original-Stream"
	OriginalSequenceHeader = "Idemgate-Original-Sequence"
)

// park publishes the message to the dead letter with its reason, waits
// for the stream's acknowledgement, and only then acknowledges the
// message: a park that fails leaves the message to be delivered again.
func (r *runner) park(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, d inbox.Decision) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.js.PublishMsg(pctx, r.deadCopy(msg, md, d)); err != nil {
		_ = msg.NakWithDelay(time.Second)
		return fmt.Errorf("parking on %s: %w", r.src.DeadLetter, err)
	}
	r.src.Logger.Warn("message parked", slog.String("consumer", r.c.Name), slog.String("reason", d.Reason),
		slog.String("dead_letter", r.src.DeadLetter))
	return msg.DoubleAck(pctx)
}

// deadCopy is the dead letter's copy of msg: its body and its headers,
// the reason, and who it was (its Nats-Msg-Id, subject, stream and
// sequence) under idemgate's headers. Its Nats-Msg-Id is the message's
// place in its stream, so that a park repeated after a crash is dropped
// by the dead letter's duplicate window. JetStream's own headers (Nats-…)
// stay behind: they are instructions to the stream the message was
// published to (Nats-Expected-Stream, Nats-Expected-Last-Sequence,
// Nats-Rollup, Nats-TTL, …), which the dead letter's stream would obey,
// refusing the park or purging itself.
func (r *runner) deadCopy(msg jetstream.Msg, md *jetstream.MsgMetadata, d inbox.Decision) *nats.Msg {
	out := nats.NewMsg(r.src.DeadLetter)
	for k, v := range msg.Headers() {
		if !strings.HasPrefix(k, "Nats-") {
			out.Header[k] = append([]string(nil), v...)
		}
	}
	out.Header.Set(inbox.ReasonHeader, d.Reason)
	out.Header.Set(inbox.ConsumerHeader, r.c.Name)
	if d.OpID != "" {
		out.Header.Set(inbox.OperationHeader, d.OpID)
	}
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		out.Header.Set(OriginalMsgIDHeader, id)
	}
	out.Header.Set(OriginalSubjectHeader, msg.Subject())
	out.Header.Set(OriginalStreamHeader, r.src.Stream)
	if md != nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		out.Header.Set(OriginalSequenceHeader, seq)
		out.Header.Set(jetstream.MsgIDHeader, "idemgate-parked:"+r.src.Stream+":"+seq)
	}
	out.Data = msg.Data()
	return out
}

// redacted is a server URL without its password, for the logs.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the server"
	}
	return u.Redacted()
}
