package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// jsStream is a stream of the test's own on a NATS server, with its dead
// letter stream, both deleted when the test ends.
type jsStream struct {
	t                    *testing.T
	url                  string
	js                   jetstream.JetStream
	name, subject, dead  string
	deadStream, consumer string
}

func newJSStream(t *testing.T, url string) *jsStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	id := suffix()
	s := &jsStream{t: t, url: url, js: js, name: "T_" + id, subject: "t." + id + ".in", dead: "t." + id + ".dead",
		deadStream: "T_" + id + "_DEAD", consumer: "idemgate-" + id}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, subject := range map[string]string{s.name: s.subject, s.deadStream: s.dead} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
			Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = js.DeleteStream(ctx, name)
		})
	}
	return s
}

// consumerYAML is the consumer's configuration, key_from its identity.
func (s *jsStream) consumerYAML(keyFrom string, extra string) string {
	return fmt.Sprintf(`  - name: billing
    tenant: acme
    source: {nats: %q, stream: %s, consumer: %s, subject: %q}
    key_from: %q
    deliver: {upstream: billing, method: POST, path: /v1/invoices}
    dead_letter: {subject: %q}
%s`, s.url, s.name, s.consumer, s.subject, keyFrom, s.dead, extra)
}

// publish publishes body with msgID (none if ""), waiting for the stream.
func (s *jsStream) publish(msgID, body string) {
	s.t.Helper()
	m := nats.NewMsg(s.subject)
	m.Data = []byte(body)
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		s.t.Fatal(err)
	}
}

// settled reports whether the consumer has nothing pending: every message
// delivered and acknowledged.
func (s *jsStream) settled() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := s.js.Consumer(ctx, s.name, s.consumer)
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
}

// parked are the dead letter's messages: their reasons, in order.
func (s *jsStream) parked() []string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := s.js.OrderedConsumer(ctx, s.deadStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		s.t.Fatal(err)
	}
	batch, err := c.FetchNoWait(100)
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for m := range batch.Messages() {
		out = append(out, m.Headers().Get(inbox.ReasonHeader))
	}
	return out
}

// Ten events, each published twice under two message ids (the stream
// cannot tell they are one): ten effects, each once, and nothing left
// pending. Four at once, so that a copy often arrives while the other
// is executing: it is delayed, not run.
func TestNATSConsumerDeliversEachEventOnce(t *testing.T) {
	t.Parallel()
	url := testenv.RequireNATS(t)
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		up, s := newInvoices(t), newJSStream(t, url)
		cfg := consumerConfig(t, db.DSN, up.srv.URL, s.consumerYAML("body:/event_id", "    concurrency: 4\n"))
		startConsume(t, cfg)
		for i := range 10 {
			body := fmt.Sprintf(`{"event_id":"evt-%d","seq":%d}`, i, i)
			s.publish(fmt.Sprintf("a-%d", i), body)
			s.publish(fmt.Sprintf("b-%d", i), body)
		}
		waitFor(t, "every message acknowledged", s.settled)
		per := up.perEvent()
		for i := range 10 {
			if n := per[fmt.Sprintf("evt-%d", i)]; n != 1 {
				t.Errorf("evt-%d: %d effects, want 1 (%v)", i, n, per)
			}
		}
		ops := consumerOps(t, db, "billing")
		if len(ops) != 10 {
			t.Fatalf("%d operations, want 10", len(ops))
		}
		for _, op := range ops {
			if op.State != ledger.Succeeded {
				t.Errorf("%s: %s, want succeeded", op.Key, op.State)
			}
		}
		// The upstream sees the key in the tenant's name and the
		// consumer's namespace.
		for _, in := range up.effects() {
			if want := "acme~consumer/billing~" + in.Event; in.Key != want {
				t.Errorf("upstream key %q for %s, want %s", in.Key, in.Event, want)
			}
		}
	})
}

// A changed body under a used identity is a conflict, and a message
// without an identity cannot be an operation: both are parked on the
// dead letter with their reason, and neither makes an effect.
func TestNATSConflictAndNoIdentityAreParked(t *testing.T) {
	t.Parallel()
	url := testenv.RequireNATS(t)
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		up, s := newInvoices(t), newJSStream(t, url)
		startConsume(t, consumerConfig(t, db.DSN, up.srv.URL, s.consumerYAML("header:Event-Id", "")))
		pub := func(event, body string) {
			m := nats.NewMsg(s.subject)
			m.Data = []byte(body)
			if event != "" {
				m.Header.Set("Event-Id", event)
			}
			if _, err := s.js.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
		pub("evt-1", `{"event_id":"evt-1","amount":100}`)
		pub("evt-1", `{"event_id":"evt-1","amount":999}`)
		pub("", `{"event_id":"evt-2","amount":5}`)
		waitFor(t, "every message settled", s.settled)
		if got := up.perEvent(); len(got) != 1 || got["evt-1"] != 1 {
			t.Fatalf("effects %v, want evt-1 once", got)
		}
		got := s.parked()
		slices.Sort(got)
		if !slices.Equal(got, []string{inbox.ReasonConflict, inbox.ReasonNoIdentity}) {
			t.Fatalf("parked %v, want a conflict and a message without identity", got)
		}
	})
}

// A message that never ends (its upstream is down: released each time,
// nothing sent) is parked once it has had max_deliveries, and makes no
// effect.
func TestNATSPoisonMessageIsParked(t *testing.T) {
	t.Parallel()
	url := testenv.RequireNATS(t)
	s := newJSStream(t, url)
	db := dbtest.SQLiteDB(t)
	startConsume(t, consumerConfig(t, db.DSN, "http://127.0.0.1:1", s.consumerYAML("body:/event_id", "    max_deliveries: 3\n")))
	s.publish("p-1", `{"event_id":"poison"}`)
	waitFor(t, "the message parked", func() bool { return len(s.parked()) == 1 })
	if got := s.parked(); got[0] != inbox.ReasonMaxDeliveries {
		t.Fatalf("parked for %q, want %q", got[0], inbox.ReasonMaxDeliveries)
	}
	waitFor(t, "nothing pending", s.settled)
	ops := consumerOps(t, db, "billing")
	if len(ops) != 1 || ops[0].State != ledger.Prepared {
		t.Fatalf("operations %v, want one prepared (never sent)", ops)
	}
}

// With concurrency 1 the messages of one key reach the upstream in the
// order they were published.
func TestNATSOrderIsKeptWithConcurrencyOne(t *testing.T) {
	t.Parallel()
	url := testenv.RequireNATS(t)
	up, s := newInvoices(t), newJSStream(t, url)
	startConsume(t, consumerConfig(t, dbtest.SQLiteDB(t).DSN, up.srv.URL, s.consumerYAML("body:/event_id", "    concurrency: 1\n")))
	for i := range 20 {
		s.publish("", fmt.Sprintf(`{"event_id":"acct-7/%d","seq":%d}`, i, i))
	}
	waitFor(t, "every message acknowledged", s.settled)
	var seqs []int
	for _, in := range up.effects() {
		seqs = append(seqs, in.Seq)
	}
	if len(seqs) != 20 || !slices.IsSorted(seqs) {
		t.Fatalf("upstream saw %v, want 0..19 in order", seqs)
	}
}

// A copy of a message that arrives while its operation is executing is
// delayed, not run: it is delivered again, and acknowledged as a copy
// once the first delivery has ended. One effect.
func TestNATSCopyWhileExecutingIsDelayed(t *testing.T) {
	t.Parallel()
	url := testenv.RequireNATS(t)
	up, s := newInvoices(t), newJSStream(t, url)
	up.hold = make(chan struct{})
	startConsume(t, consumerConfig(t, dbtest.SQLiteDB(t).DSN, up.srv.URL, s.consumerYAML("body:/event_id", "    concurrency: 2\n")))
	s.publish("first", `{"event_id":"evt-1"}`)
	<-up.applied
	s.publish("copy", `{"event_id":"evt-1"}`)
	waitFor(t, "the copy delivered again", func() bool {
		c, err := s.js.Consumer(context.Background(), s.name, s.consumer)
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumRedelivered > 0
	})
	if n := len(up.effects()); n != 1 {
		t.Fatalf("%d effects while the first delivery runs, want 1", n)
	}
	close(up.hold)
	waitFor(t, "both acknowledged", s.settled)
	if n := len(up.effects()); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// Issue 34's drill: the dead letter's stream is missing. A conflict and a
// message without identity could never be parked, and kept the only slot
// of a consumer of concurrency 1, so the message behind them never
// reached the upstream, without a word. The consumer now refuses to
// consume, saying why; once the operator makes the stream, both are
// parked (with who they were) and the message behind them is delivered.
func TestNATSDeadLetterWithoutAStream(t *testing.T) {
	t.Parallel()
	url := testenv.RequireNATS(t)
	up, s := newInvoices(t), newJSStream(t, url)
	if err := s.js.DeleteStream(context.Background(), s.deadStream); err != nil {
		t.Fatal(err)
	}
	p := startConsume(t, consumerConfig(t, dbtest.SQLiteDB(t).DSN, up.srv.URL, s.consumerYAML("header:Event-Id", "")))
	pub := func(msgID, event, body string) {
		m := nats.NewMsg(s.subject)
		m.Data = []byte(body)
		m.Header.Set(jetstream.MsgIDHeader, msgID)
		if event != "" {
			m.Header.Set("Event-Id", event)
		}
		if _, err := s.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	pub("m-1", "evt-1", `{"event_id":"evt-1","amount":100}`)
	pub("m-2", "evt-1", `{"event_id":"evt-1","amount":999}`)
	pub("m-3", "", `{"event_id":"evt-2","amount":5}`)
	pub("m-4", "evt-3", `{"event_id":"evt-3","amount":7}`)
	waitFor(t, "the refusal logged", func() bool {
		return slices.ContainsFunc(p.Logs(), func(l string) bool {
			return strings.Contains(l, "consumer interrupted") && strings.Contains(l, s.dead+" is captured by no stream")
		})
	})
	if n := len(up.effects()); n != 0 {
		t.Fatalf("%d effects while the dead letter has no stream, want none", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: s.deadStream, Subjects: []string{s.dead}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every message settled", s.settled)
	if got := up.perEvent(); len(got) != 2 || got["evt-1"] != 1 || got["evt-3"] != 1 {
		t.Fatalf("effects %v, want evt-1 and evt-3 once each", got)
	}
	got := s.parked()
	slices.Sort(got)
	if !slices.Equal(got, []string{inbox.ReasonConflict, inbox.ReasonNoIdentity}) {
		t.Fatalf("parked %v, want a conflict and a message without identity", got)
	}
}
