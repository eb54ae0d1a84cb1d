// Package amqpinbox runs an inbox consumer (package inbox) on a RabbitMQ
// queue (AMQP 0-9-1): manual acknowledgements, a prefetch of twice the
// consumer's concurrency (inbox.ReadAhead) with at most concurrency
// messages handled at once, and publisher confirms for the dead letter.
// It reconnects by itself when the broker restarts.
package amqpinbox

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgate/idemgate/inbox"
)

// Source is a queue consumer's settings.
type Source struct {
	URL   string
	Queue string
	// Exchange and RoutingKey are where parked messages are published
	// ("" is the default exchange, whose routing key is a queue's name).
	Exchange, RoutingKey string
	Concurrency          int
	Logger               *slog.Logger
	// Observer hears of the parks and of the connection (nil: nothing).
	Observer inbox.Observer
	// Recheck, at each receive, has the dead letter checked again (the
	// server sends one at each reload): one gone ends the session, and the
	// next refuses to consume, as at start-up.
	Recheck <-chan struct{}
}

// Run consumes until ctx ends, each message handled by c; the messages in
// hand are finished before it returns.
func Run(ctx context.Context, src Source, c *inbox.Consumer) error {
	if src.Concurrency <= 0 {
		src.Concurrency = 1
	}
	if src.Logger == nil {
		src.Logger = slog.New(slog.DiscardHandler)
	}
	if src.Observer == nil {
		src.Observer = inbox.Unobserved{}
	}
	r := &runner{src: src, c: c, seen: map[[32]byte]int{}}
	inbox.Sessions(ctx, c.Name, src.Logger, r.session)
	return nil
}

type runner struct {
	src Source
	c   *inbox.Consumer
	mu  sync.Mutex
	// seen counts the deliveries of messages the broker does not count
	// (a classic queue says only "redelivered"), for this process's life.
	seen map[[32]byte]int
	// parking serialises the parks of a session so that a basic.return
	// found after a confirm can only be the park's own.
	parking sync.Mutex
}

// session is one connection: it consumes until the connection fails or
// ctx ends, then waits for the messages in hand.
func (r *runner) session(ctx context.Context) error {
	conn, err := amqp.DialConfig(r.src.URL, amqp.Config{Heartbeat: 5 * time.Second,
		Properties: amqp.Table{"connection_name": "idemgate consumer " + r.c.Name + " of " + r.src.Queue}})
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := r.deadLetterExists(conn); err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	pub, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(inbox.ReadAhead(r.src.Concurrency), 0, false); err != nil {
		return err
	}
	if err := pub.Confirm(false); err != nil {
		return err
	}
	// Buffered: the client hands a return over before it dispatches the
	// confirm that follows it, so a park sees its own return once confirmed.
	returns := pub.NotifyReturn(make(chan amqp.Return, 1))
	deliveries, err := ch.Consume(r.src.Queue, "idemgate-"+r.c.Name, false, false, false, false, nil)
	if err != nil {
		return err
	}
	r.src.Observer.Connected(r.c.Name, true)
	defer r.src.Observer.Connected(r.c.Name, false)
	return r.loop(ctx, conn, ch, &publisher{pub, returns}, deliveries)
}

func (r *runner) loop(ctx context.Context, conn *amqp.Connection, ch *amqp.Channel, pub *publisher, deliveries <-chan amqp.Delivery) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	// A retry held for its delay lets go as soon as the session ends: its
	// message is the broker's again once the connection is gone.
	sctx, end := context.WithCancel(ctx)
	defer end()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	slots := make(chan struct{}, r.src.Concurrency)
	for {
		select {
		case <-ctx.Done():
			_ = ch.Cancel("idemgate-"+r.c.Name, false)
			return nil
		case err := <-closed:
			return fmt.Errorf("connection closed: %v", err)
		case <-r.src.Recheck: // a reload: the dead letter may be gone since
			if err := r.deadLetterExists(conn); err != nil {
				return err
			}
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("the broker ended the consumer of %s", r.src.Queue)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case slots <- struct{}{}:
				case <-sctx.Done():
					return // read ahead, never handled: the broker has it again once the session ends
				}
				// Detached: a stopping consumer finishes what it holds.
				r.handle(context.WithoutCancel(ctx), sctx, pub, d, sync.OnceFunc(func() { <-slots }))
			}()
		}
	}
}

// publisher is the session's confirming channel for parks, with the
// messages the broker returns as routed to no queue.
type publisher struct {
	ch      *amqp.Channel
	returns <-chan amqp.Return
}

// deadLetterExists checks, on a channel of its own (a missing queue or
// exchange closes it), that the dead letter's exchange exists and, on the
// default exchange, its queue. A park routed to no queue is still caught
// at publish time (mandatory, then returned), this only fails early.
func (r *runner) deadLetterExists(conn *amqp.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if r.src.Exchange != "" {
		if err := ch.ExchangeDeclarePassive(r.src.Exchange, "direct", true, false, false, false, nil); err != nil {
			return fmt.Errorf("dead letter exchange %q: %w", r.src.Exchange, err)
		}
		return nil
	}
	if _, err := ch.QueueDeclarePassive(r.src.RoutingKey, true, false, false, false, nil); err != nil {
		return fmt.Errorf("dead letter queue %q: %w", r.src.RoutingKey, err)
	}
	return nil
}

// handle runs one message in the handling slot that free gives back,
// and tells the broker what became of it. A retry holds the message for
// its delay (within the prefetch, not in a handling slot), then returns
// it to its queue.
func (r *runner) handle(ctx, stopping context.Context, pub *publisher, d amqp.Delivery, free func()) {
	defer free()
	m := inbox.Message{Header: headers(d.Headers), MessageID: d.MessageId, ContentType: d.ContentType, Body: d.Body,
		Deliveries: r.deliveries(d)}
	dec := r.c.Handle(ctx, m)
	var err error
	switch dec.Verdict {
	case inbox.Ack:
		r.forget(d)
		err = d.Ack(false)
	case inbox.Retry:
		free()
		select {
		case <-time.After(dec.Delay):
		case <-stopping.Done():
		}
		err = d.Nack(false, true)
	case inbox.Park:
		err = r.park(ctx, pub, d, dec)
	}
	if err != nil {
		r.src.Logger.Warn("message left to be delivered again", slog.String("consumer", r.c.Name),
			slog.String("reason", dec.Reason), slog.String("error", err.Error()))
	}
}

// park publishes the message to the dead letter with its reason, waits
// for the broker's confirm, and only then acknowledges it: a park that
// fails leaves the message in its queue.
func (r *runner) park(ctx context.Context, pub *publisher, d amqp.Delivery, dec inbox.Decision) error {
	h := amqp.Table{}
	for k, v := range d.Headers {
		h[k] = v
	}
	h[inbox.ReasonHeader], h[inbox.ConsumerHeader] = dec.Reason, r.c.Name
	if dec.OpID != "" {
		h[inbox.OperationHeader] = dec.OpID
	}
	if err := r.publish(ctx, pub, amqp.Publishing{Headers: h, MessageId: d.MessageId, ContentType: d.ContentType,
		Body: d.Body, DeliveryMode: amqp.Persistent, Timestamp: time.Now()}); err != nil {
		r.src.Observer.ParkUnconfirmed(r.c.Name)
		r.src.Logger.Error("park failed, message kept in its queue", slog.String("consumer", r.c.Name),
			slog.String("reason", dec.Reason), slog.String("error", err.Error()))
		// A short pause: a dead letter that routes nowhere must not turn
		// the queue into a hot loop while an operator fixes the binding.
		time.Sleep(parkBackoff)
		_ = d.Nack(false, true)
		return fmt.Errorf("parking on %q %q: %w", r.src.Exchange, r.src.RoutingKey, err)
	}
	r.forget(d)
	r.src.Observer.Parked(r.c.Name, dec.Reason)
	r.src.Logger.Warn("message parked", slog.String("consumer", r.c.Name), slog.String("reason", dec.Reason),
		slog.String("dead_letter", r.src.RoutingKey))
	return d.Ack(false)
}

// parkBackoff is how long a message whose park failed waits before it
// goes back to its queue.
const parkBackoff = time.Second

// publish sends m to the dead letter as mandatory and waits for the
// broker's confirm: a nack, or a return (no queue took it), is an error.
func (r *runner) publish(ctx context.Context, pub *publisher, m amqp.Publishing) error {
	r.parking.Lock()
	defer r.parking.Unlock()
	for len(pub.returns) > 0 { // a return left by a park that timed out
		<-pub.returns
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conf, err := pub.ch.PublishWithDeferredConfirmWithContext(pctx, r.src.Exchange, r.src.RoutingKey, true, false, m)
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(pctx)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("the broker refused it")
	}
	select {
	case ret := <-pub.returns:
		return fmt.Errorf("the broker routed it to no queue: %d %s", ret.ReplyCode, ret.ReplyText)
	default:
		return nil
	}
}

// deliveries counts d's deliveries: a quorum queue's x-delivery-count,
// or else this process's own count of a redelivered message.
func (r *runner) deliveries(d amqp.Delivery) int {
	switch n := d.Headers["x-delivery-count"].(type) {
	case int64:
		return int(n) + 1
	case int32:
		return int(n) + 1
	}
	if !d.Redelivered {
		return 1
	}
	id := identity(d)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) > 100_000 {
		clear(r.seen)
	}
	r.seen[id] = max(r.seen[id]+1, 2)
	return r.seen[id]
}

func (r *runner) forget(d amqp.Delivery) {
	if d.Redelivered {
		r.mu.Lock()
		delete(r.seen, identity(d))
		r.mu.Unlock()
	}
}

func identity(d amqp.Delivery) [32]byte {
	return sha256.Sum256(append([]byte(d.MessageId+"\x00"), d.Body...))
}

// headers are an AMQP table's values as text.
func headers(t amqp.Table) map[string][]string {
	out := make(map[string][]string, len(t))
	for k, v := range t {
		switch v := v.(type) {
		case string:
			out[k] = []string{v}
		case []byte:
			out[k] = []string{string(v)}
		case int, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool:
			out[k] = []string{fmt.Sprint(v)}
		}
	}
	return out
}
