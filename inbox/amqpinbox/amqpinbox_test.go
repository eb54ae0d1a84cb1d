package amqpinbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/inbox/amqpinbox"
	"github.com/idemgate/idemgate/inbox/inboxtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// queue is a queue of the test's own and its dead letter queue, deleted
// at its end.
type queue struct {
	t          *testing.T
	url        string
	ch         *amqp.Channel
	name, dead string
}

func newQueue(t *testing.T) *queue {
	t.Helper()
	url := testenv.RequireAMQP(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	q := &queue{t: t, url: url, ch: ch, name: "t." + id + ".in", dead: "t." + id + ".dead"}
	for _, name := range []string{q.name, q.dead} {
		if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = ch.QueueDelete(name, false, false, false) })
	}
	return q
}

// publish sends body with messageID (none if "").
func (q *queue) publish(messageID, body string) {
	q.t.Helper()
	if err := q.ch.PublishWithContext(context.Background(), "", q.name, false, false, amqp.Publishing{
		MessageId: messageID, Body: []byte(body), DeliveryMode: amqp.Persistent}); err != nil {
		q.t.Fatal(err)
	}
}

// depth is how many messages wait in name.
func (q *queue) depth(name string) int {
	q.t.Helper()
	info, err := q.ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		q.t.Fatal(err)
	}
	return info.Messages
}

// delivered acknowledges every delivery: an upstream that applies them.
type delivered struct{}

func (delivered) Deliver(context.Context, inbox.Delivery) (inbox.Outcome, error) {
	return inbox.Outcome{State: ledger.Succeeded}, nil
}

// run runs a consumer of the queue, keyed by message_id, whose upstream
// applies every message, until the test ends; its log lines and what it
// reports are the test's.
func (q *queue) run(src amqpinbox.Source) (*testenv.Logs, *inboxtest.Heard) {
	key, _ := inbox.ParseKeyFrom("message_id")
	return q.runConsumer(src, &inbox.Consumer{Name: "billing", KeyFrom: key, Deliver: delivered{}})
}

// runConsumer is run with c as the consumer.
func (q *queue) runConsumer(src amqpinbox.Source, c *inbox.Consumer) (*testenv.Logs, *inboxtest.Heard) {
	l, h := &testenv.Logs{}, &inboxtest.Heard{}
	src.URL, src.Queue = q.url, q.name
	if src.Exchange == "" {
		src.RoutingKey = q.dead
	}
	src.Logger, src.Observer = slog.New(slog.NewJSONHandler(l, nil)), h
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = amqpinbox.Run(ctx, src, c)
	}()
	q.t.Cleanup(func() { cancel(); <-done })
	return l, h
}

// The observer hears the consumer up, each park the broker confirmed
// with its reason, the consumer down when the broker closes its
// connection, and up again once it has reconnected.
func TestParksAndConnectionAreHeard(t *testing.T) {
	q := newQueue(t)
	_, h := q.run(amqpinbox.Source{})
	testenv.WaitFor(t, "the consumer up", h.Up)
	q.publish("", `{"amount":5}`)
	testenv.WaitFor(t, "the park heard", func() bool { return len(h.Reasons()) == 1 })
	if got := h.Reasons(); got[0] != inbox.ReasonNoIdentity || q.depth(q.dead) != 1 {
		t.Fatalf("parks heard %v, %d in the dead letter", got, q.depth(q.dead))
	}
	ups := h.Ups()
	testenv.CloseAMQPConnection(t, "of "+q.name)
	testenv.WaitFor(t, "the consumer down", func() bool { return !h.Up() })
	testenv.WaitFor(t, "the consumer up again", func() bool { return h.Up() && h.Ups() > ups })
}

// A park the broker routes to no queue (an exchange without a binding
// for it) is counted unconfirmed, and the message stays in its queue.
func TestParkRoutedNowhereIsUnconfirmed(t *testing.T) {
	q := newQueue(t)
	exchange := q.name + ".dlx"
	if err := q.ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.ch.ExchangeDelete(exchange, false, false) })
	_, h := q.run(amqpinbox.Source{Exchange: exchange, RoutingKey: "nowhere"})
	q.publish("", `{"amount":5}`)
	testenv.WaitFor(t, "the park counted unconfirmed", func() bool { return h.Unconfirmed() > 0 })
	if len(h.Reasons()) != 0 {
		t.Fatalf("parks heard confirmed: %v", h.Reasons())
	}
}

// At a reload (Recheck) the dead letter is looked for again: a queue
// deleted meanwhile ends the session, the consumer says why, and it
// reports itself down while the next sessions refuse.
func TestRecheckFindsTheDeadLetterGone(t *testing.T) {
	q := newQueue(t)
	recheck := make(chan struct{}, 1)
	l, h := q.run(amqpinbox.Source{Recheck: recheck})
	testenv.WaitFor(t, "the consumer up", h.Up)
	if _, err := q.ch.QueueDelete(q.dead, false, false, false); err != nil {
		t.Fatal(err)
	}
	recheck <- struct{}{}
	testenv.WaitFor(t, "the refusal logged", func() bool {
		return l.Line("consumer interrupted", "dead letter queue", q.dead, "NOT_FOUND") != ""
	})
	testenv.WaitFor(t, "the consumer down", func() bool { return !h.Up() })
}

// holding is an upstream that holds each delivery until release is
// closed, counting the deliveries it holds at once; a message keyed
// retry is answered at once with a refusal, which the consumer retries.
type holding struct {
	release chan struct{}
	once    sync.Once
	retry   string
	mu      sync.Mutex
	now     int
	peak    int
	done    int
}

func (h *holding) Deliver(_ context.Context, d inbox.Delivery) (inbox.Outcome, error) {
	if d.Key == h.retry {
		return inbox.Outcome{Code: contract.CodeInProgress}, nil
	}
	h.count(func() { h.now++; h.peak = max(h.peak, h.now) })
	<-h.release
	h.count(func() { h.now--; h.done++ })
	return inbox.Outcome{State: ledger.Succeeded}, nil
}

// free lets every delivery held, and every later one, go.
func (h *holding) free() { h.once.Do(func() { close(h.release) }) }

func (h *holding) count(fn func()) { h.mu.Lock(); defer h.mu.Unlock(); fn() }

func (h *holding) read() (now, peak, done int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now, h.peak, h.done
}

// runHolding runs a consumer of concurrency 2 whose upstream is h and
// whose retries wait an hour. A test that fails frees what h holds
// before the consumer is stopped, which waits for its deliveries.
func (q *queue) runHolding(h *holding) {
	key, _ := inbox.ParseKeyFrom("message_id")
	q.runConsumer(amqpinbox.Source{Concurrency: 2}, &inbox.Consumer{Name: "billing", KeyFrom: key, Deliver: h,
		Backoff: func(int) time.Duration { return time.Hour }})
	q.t.Cleanup(h.free)
}

// A consumer handles at most its concurrency at once, and reads twice as
// many ahead: while two deliveries are held, the broker has handed it two
// more, and the queue keeps the rest.
func TestHandlesConcurrencyAndReadsAhead(t *testing.T) {
	q := newQueue(t)
	h := &holding{release: make(chan struct{})}
	q.runHolding(h)
	for i := range 6 {
		q.publish(fmt.Sprintf("m-%d", i), `{"amount":5}`)
	}
	testenv.WaitFor(t, "two deliveries held", func() bool { now, _, _ := h.read(); return now == 2 })
	testenv.WaitFor(t, "four messages handed to the consumer", func() bool { return q.depth(q.name) == 2 })
	h.free()
	testenv.WaitFor(t, "six deliveries done", func() bool { _, _, done := h.read(); return done == 6 })
	if _, peak, _ := h.read(); peak != 2 {
		t.Fatalf("%d deliveries at once, concurrency 2", peak)
	}
}

// A retry waiting out its delay holds its message, not a handling slot:
// the consumer's two slots go on handling the messages behind it.
func TestRetryHoldsNoHandlingSlot(t *testing.T) {
	q := newQueue(t)
	h := &holding{release: make(chan struct{}), retry: "again"}
	q.runHolding(h)
	q.publish("again", `{"amount":5}`)
	q.publish("a", `{"amount":5}`)
	q.publish("b", `{"amount":5}`)
	testenv.WaitFor(t, "two deliveries held beside the retry", func() bool { now, _, _ := h.read(); return now == 2 })
	h.free()
	testenv.WaitFor(t, "both done", func() bool { _, _, done := h.read(); return done == 2 })
}
