package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// rabbitQueue is a queue of the test's own, with its dead letter queue,
// both deleted when the test ends.
type rabbitQueue struct {
	t          *testing.T
	url        string
	ch         *amqp.Channel
	name, dead string
}

func newRabbitQueue(t *testing.T, url string) *rabbitQueue {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	id := suffix()
	q := &rabbitQueue{t: t, url: url, ch: ch, name: "t." + id + ".in", dead: "t." + id + ".dead"}
	for _, name := range []string{q.name, q.dead} {
		if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = ch.QueueDelete(name, false, false, false) })
	}
	return q
}

func (q *rabbitQueue) consumerYAML(keyFrom, extra string) string {
	return fmt.Sprintf(`  - name: billing
    tenant: acme
    source: {amqp: %q, queue: %q}
    key_from: %q
    deliver: {upstream: billing, method: POST, path: /v1/invoices}
    dead_letter: {exchange: "", routing_key: %q}
%s`, q.url, q.name, keyFrom, q.dead, extra)
}

// publish sends body to the queue with messageID (none if ""), persistent.
func (q *rabbitQueue) publish(messageID, body string) {
	q.t.Helper()
	err := q.ch.PublishWithContext(context.Background(), "", q.name, false, false, amqp.Publishing{
		MessageId: messageID, ContentType: "application/json", Body: []byte(body), DeliveryMode: amqp.Persistent})
	if err != nil {
		q.t.Fatal(err)
	}
}

// depth is how many messages wait in name, and how many consumers it has.
func (q *rabbitQueue) depth(name string) (messages, consumers int) {
	info, err := q.ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		q.t.Fatal(err)
	}
	return info.Messages, info.Consumers
}

// pending is how many of the queue's messages are not acknowledged yet:
// ready, or held by a consumer (rabbitmqctl says; AMQP itself counts only
// the ready ones).
func (q *rabbitQueue) pending() int {
	out, err := exec.Command("rabbitmqctl", "list_queues", "-q", "name", "messages_ready", "messages_unacknowledged").Output()
	if err != nil {
		q.t.Fatalf("rabbitmqctl: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		var name string
		var ready, unacked int
		if n, _ := fmt.Sscan(line, &name, &ready, &unacked); n == 3 && name == q.name {
			return ready + unacked
		}
	}
	q.t.Fatalf("rabbitmqctl does not list %s", q.name)
	return 0
}

// parked takes the dead letter's messages: their reasons.
func (q *rabbitQueue) parked() []string {
	var out []string
	for {
		m, ok, err := q.ch.Get(q.dead, true)
		if err != nil {
			q.t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, fmt.Sprint(m.Headers[inbox.ReasonHeader]))
	}
}

// Ten events, each published twice under two message ids: ten effects,
// and the queue empty with nothing held once the consumer stops.
func TestAMQPConsumerDeliversEachEventOnce(t *testing.T) {
	t.Parallel()
	url := testenv.RequireAMQP(t)
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		up, q := newInvoices(t), newRabbitQueue(t, url)
		startConsume(t, consumerConfig(t, db.DSN, up.srv.URL, q.consumerYAML("body:/event_id", "    concurrency: 4\n")))
		for i := range 10 {
			body := fmt.Sprintf(`{"event_id":"evt-%d","seq":%d}`, i, i)
			q.publish(fmt.Sprintf("a-%d", i), body)
			q.publish(fmt.Sprintf("b-%d", i), body)
		}
		waitFor(t, "ten effects", func() bool { return len(up.perEvent()) == 10 })
		waitFor(t, "every operation final", func() bool {
			ops := consumerOps(t, db, "billing")
			return len(ops) == 10 && !slices.ContainsFunc(ops, func(op *ledger.Operation) bool { return op.State != ledger.Succeeded })
		})
		// Every message acknowledged: none waiting, none held by the consumer
		// (a copy that met its operation executing waits for its delay).
		waitFor(t, "every message acknowledged", func() bool { return q.pending() == 0 })
		for event, k := range up.perEvent() {
			if k != 1 {
				t.Errorf("%s: %d effects, want 1", event, k)
			}
		}
	})
}

// A changed body under a used message_id, and a message without one:
// both parked with their reason, no effect made by either.
func TestAMQPConflictAndNoIdentityAreParked(t *testing.T) {
	t.Parallel()
	url := testenv.RequireAMQP(t)
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		up, q := newInvoices(t), newRabbitQueue(t, url)
		startConsume(t, consumerConfig(t, db.DSN, up.srv.URL, q.consumerYAML("message_id", "")))
		q.publish("evt-1", `{"event_id":"evt-1","amount":100}`)
		q.publish("evt-1", `{"event_id":"evt-1","amount":999}`)
		q.publish("", `{"event_id":"evt-2","amount":5}`)
		var got []string
		waitFor(t, "two messages parked", func() bool { got = append(got, q.parked()...); return len(got) >= 2 })
		slices.Sort(got)
		if !slices.Equal(got, []string{inbox.ReasonConflict, inbox.ReasonNoIdentity}) {
			t.Fatalf("parked %v, want a conflict and a message without identity", got)
		}
		waitFor(t, "every message acknowledged", func() bool { return q.pending() == 0 })
		if got := up.perEvent(); len(got) != 1 || got["evt-1"] != 1 {
			t.Fatalf("effects %v, want evt-1 once", got)
		}
	})
}

// A message that never ends (its upstream is down) is parked once it has
// had max_deliveries, and makes no effect.
func TestAMQPPoisonMessageIsParked(t *testing.T) {
	t.Parallel()
	url := testenv.RequireAMQP(t)
	q := newRabbitQueue(t, url)
	startConsume(t, consumerConfig(t, dbtest.SQLiteDB(t).DSN, "http://127.0.0.1:1", q.consumerYAML("message_id", "    max_deliveries: 3\n")))
	q.publish("poison-1", `{"event_id":"poison"}`)
	var got []string
	waitFor(t, "the message parked", func() bool { got = append(got, q.parked()...); return len(got) >= 1 })
	if got[0] != inbox.ReasonMaxDeliveries {
		t.Fatalf("parked for %q, want %q", got[0], inbox.ReasonMaxDeliveries)
	}
	if n, _ := q.depth(q.name); n != 0 {
		t.Fatalf("%d messages left in the queue", n)
	}
}

// With concurrency 1 (a prefetch of one) the messages reach the upstream
// in the order they were published.
func TestAMQPOrderIsKeptWithConcurrencyOne(t *testing.T) {
	t.Parallel()
	url := testenv.RequireAMQP(t)
	up, q := newInvoices(t), newRabbitQueue(t, url)
	startConsume(t, consumerConfig(t, dbtest.SQLiteDB(t).DSN, up.srv.URL, q.consumerYAML("body:/event_id", "    concurrency: 1\n")))
	for i := range 20 {
		q.publish("", fmt.Sprintf(`{"event_id":"acct-7/%d","seq":%d}`, i, i))
	}
	waitFor(t, "twenty effects", func() bool { return len(up.effects()) == 20 })
	var seqs []int
	for _, in := range up.effects() {
		seqs = append(seqs, in.Seq)
	}
	if !slices.IsSorted(seqs) {
		t.Fatalf("upstream saw %v, want 0..19 in order", seqs)
	}
}

// The broker drops the consumer's connection mid-stream (the shared
// RabbitMQ is never restarted; a dropped connection is what a consumer
// sees of a restart): it reconnects by itself, and every message makes
// its effect once.
func TestAMQPConnectionLostMidStream(t *testing.T) {
	t.Parallel()
	url := testenv.RequireAMQP(t)
	up, q := newInvoices(t), newRabbitQueue(t, url)
	up.delay = 10 * time.Millisecond
	p := startConsume(t, consumerConfig(t, dbtest.SQLiteDB(t).DSN, up.srv.URL, q.consumerYAML("body:/event_id", "    concurrency: 2\n")))
	const n = 40
	paused, resume := up.pauseAfter(10)
	for i := range n {
		q.publish("", fmt.Sprintf(`{"event_id":"evt-%d","seq":%d}`, i, i))
	}
	waitFor(t, "two deliveries in flight", paused)
	testenv.CloseAMQPConnection(t, "of "+q.name)
	resume()
	waitFor(t, "every message applied after the reconnection", func() bool { return len(up.perEvent()) == n })
	waitFor(t, "every message acknowledged", func() bool { return q.pending() == 0 })
	if !slices.ContainsFunc(p.Logs(), func(l string) bool { return strings.Contains(l, "consumer interrupted") }) {
		t.Fatalf("the consumer never saw its connection drop: %v", p.Logs())
	}
	for event, k := range up.perEvent() {
		if k != 1 {
			t.Errorf("%s: %d effects, want 1", event, k)
		}
	}
}

// The consumer process is SIGKILLed while the upstream applies a
// delivery; the broker requeues the message at once, and the consumer
// started again makes no second effect: the operation is executing (the
// copy waits), then unknown once its lease lapses, and acknowledged.
func TestAMQPConsumerKilledDuringDelivery(t *testing.T) {
	t.Parallel()
	url := testenv.RequireAMQP(t)
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		up, q := newInvoices(t), newRabbitQueue(t, url)
		cfg := consumerConfig(t, db.DSN, up.srv.URL, q.consumerYAML("message_id", "    lease: 1s\n"))
		killedDuringDelivery(t, db, up, cfg, func() { q.publish("evt-killed", `{"event_id":"evt-killed"}`) },
			func() bool { return q.pending() == 0 })
	})
}

// A dead letter on an exchange that routes the reason nowhere: the broker
// returns the park, so the conflicting message stays in its queue (never
// acknowledged, never lost) and makes no effect.
func TestAMQPParkRoutedNowhereIsKept(t *testing.T) {
	t.Parallel()
	url := testenv.RequireAMQP(t)
	up, q := newInvoices(t), newRabbitQueue(t, url)
	exchange := q.name + ".dlx"
	if err := q.ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.ch.ExchangeDelete(exchange, false, false) })
	yaml := strings.Replace(q.consumerYAML("message_id", ""), `exchange: ""`, fmt.Sprintf("exchange: %q", exchange), 1)
	p := startConsume(t, consumerConfig(t, dbtest.SQLiteDB(t).DSN, up.srv.URL, yaml))
	q.publish("evt-1", `{"event_id":"evt-1","amount":100}`)
	waitFor(t, "the first message acknowledged", func() bool { return q.pending() == 0 })
	q.publish("evt-1", `{"event_id":"evt-1","amount":999}`)
	// Its park returned, it goes back to its queue and is taken again:
	// a second failed park is that cycle seen whole.
	waitFor(t, "two failed parks", func() bool {
		n := 0
		for _, l := range p.Logs() {
			if strings.Contains(l, "park failed, message kept in its queue") {
				n++
			}
		}
		return n >= 2
	})
	if n := q.pending(); n != 1 {
		t.Fatalf("%d messages left in the queue, want the conflicting one kept", n)
	}
	if got := up.perEvent(); len(got) != 1 || got["evt-1"] != 1 {
		t.Fatalf("effects %v, want evt-1 once", got)
	}
}
