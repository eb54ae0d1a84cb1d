package server_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/internal/surfacetest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// broker is a NATS JetStream or a RabbitMQ of the suite's own streams or
// queues: it publishes to a consumer and hears its dead letter.
type broker struct {
	kind    string // nats or amqp
	id      string
	publish func(t testing.TB, consumer, key, body string)
	mu      sync.Mutex
	parked  map[string]map[string]string // by Event-Id: the parked copy's headers
}

// consumerNames are a broker's consumers: tenant A's to each upstream,
// and tenant B's.
func consumerName(kind string, c surfacetest.Call) string {
	up := map[surfacetest.Upstream]string{surfacetest.Answers: "ok", surfacetest.LosesAnswer: "lost",
		surfacetest.Breakable: "flaky"}[c.Upstream]
	return kind + "-" + c.Tenant + "-" + up
}

var consumerCalls = []surfacetest.Call{
	{Tenant: surfacetest.TenantA, Upstream: surfacetest.Answers}, {Tenant: surfacetest.TenantA, Upstream: surfacetest.LosesAnswer},
	{Tenant: surfacetest.TenantA, Upstream: surfacetest.Breakable}, {Tenant: surfacetest.TenantB, Upstream: surfacetest.Answers},
}

// consumerYAML is a consumer's configuration, its source and dead letter
// the broker's.
func consumerYAML(name string, c surfacetest.Call, source, dead string) string {
	up, path := "suite", "/c/"+name
	if c.Upstream == surfacetest.Breakable {
		up = "flaky"
	}
	if c.Upstream == surfacetest.LosesAnswer {
		path += "/lost"
	}
	return fmt.Sprintf("  - {name: %s, tenant: %s, source: %s, key_from: header:Event-Id,\n"+
		"     deliver: {upstream: %s, path: %s}, dead_letter: %s}\n", name, c.Tenant, source, up, path, dead)
}

func (b *broker) heard(key string, h map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.parked[key] = h
}

func (b *broker) parkedCopy(key string) map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.parked[key]
}

// newNATS makes the suite's stream (one subject per consumer) and dead
// letter stream, and hears the dead letter.
func newNATS(t *testing.T) (*broker, string) {
	url := testenv.RequireNATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	b := &broker{kind: "nats", id: runSuffix(), parked: map[string]map[string]string{}}
	stream, in, dead := "SUITE_"+b.id, "suite."+b.id+".in", "suite."+b.id+".dead"
	for name, subj := range map[string]string{stream: in + ".>", stream + "_DEAD": dead} {
		if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subj}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	}
	if _, err := nc.Subscribe(dead, func(m *nats.Msg) {
		h := map[string]string{}
		for k := range m.Header {
			h[k] = m.Header.Get(k)
		}
		b.heard(m.Header.Get("Event-Id"), h)
	}); err != nil {
		t.Fatal(err)
	}
	b.publish = func(t testing.TB, consumer, key, body string) {
		m := nats.NewMsg(in + "." + consumer)
		m.Header.Set("Event-Id", key)
		m.Data = []byte(body)
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Error(err)
		}
	}
	var yaml strings.Builder
	for _, c := range consumerCalls {
		name := consumerName("nats", c)
		yaml.WriteString(consumerYAML(name, c, fmt.Sprintf("{nats: %q, stream: %s, consumer: %s, subject: %q}", url, stream,
			name, in+"."+name), fmt.Sprintf("{subject: %q}", dead)))
	}
	// Issue 30, case 4: upstreams answering 500 and 503 (ConsumerCases).
	for _, st := range []string{"500", "503"} {
		name := "nats-acme-s" + st
		fmt.Fprintf(&yaml, "  - {name: %s, tenant: acme, source: {nats: %q, stream: %s, consumer: %s, subject: %q},\n"+
			"     key_from: header:Event-Id, deliver: {upstream: suite, path: /c/%s/status/%s}, dead_letter: {subject: %q},\n"+
			"     outcomes: {not_applied: [503]}, max_deliveries: 2}\n", name, url, stream, name, in+"."+name, name, st, dead)
	}
	return b, yaml.String()
}

// newAMQP makes a queue per consumer and the dead letter queue, and hears
// the dead letter.
func newAMQP(t *testing.T) (*broker, string) {
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
	b := &broker{kind: "amqp", id: runSuffix(), parked: map[string]map[string]string{}}
	queue := func(name string) string { return "suite." + b.id + "." + name }
	declare := func(q string) {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	}
	declare(queue("dead"))
	var yaml strings.Builder
	for _, c := range consumerCalls {
		name := consumerName("amqp", c)
		declare(queue(name))
		yaml.WriteString(consumerYAML(name, c, fmt.Sprintf("{amqp: %q, queue: %q}", url, queue(name)),
			fmt.Sprintf("{exchange: \"\", routing_key: %q}", queue("dead"))))
	}
	deliveries, err := ch.Consume(queue("dead"), "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range deliveries {
			h := map[string]string{}
			for k, v := range d.Headers {
				h[k] = fmt.Sprint(v)
			}
			b.heard(h["Event-Id"], h)
		}
	}()
	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	var pmu sync.Mutex
	b.publish = func(t testing.TB, consumer, key, body string) {
		pmu.Lock()
		defer pmu.Unlock()
		if err := pub.PublishWithContext(context.Background(), "", queue(consumer), false, false, amqp.Publishing{
			Headers: amqp.Table{"Event-Id": key}, ContentType: "application/json", Body: []byte(body),
			DeliveryMode: amqp.Persistent}); err != nil {
			t.Error(err)
		}
	}
	return b, yaml.String()
}

var (
	suffixMu     sync.Mutex
	suffixN      int
	testRunStart = time.Now().UnixNano()
)

// runSuffix names a broker's streams and queues apart from every other
// run's and store's.
func runSuffix() string {
	suffixMu.Lock()
	defer suffixMu.Unlock()
	suffixN++
	return fmt.Sprintf("%d_%d", testRunStart, suffixN)
}

// consumerSurface: a message published to a broker, handled by the
// gateway's consumer of the call's tenant and upstream. Its sends are
// one at a time: each waits for the executor's observation of its
// message (the metrics), then reads the operation and the dead letter.
type consumerSurface struct {
	*suiteGateway
	b  *broker
	mu sync.Mutex
}

func (s *consumerSurface) Name() string { return s.b.kind }

func (s *consumerSurface) Store() ledger.Store { return s.store }

func (s *consumerSurface) Key(c surfacetest.Call) ledger.OpKey {
	return ledger.OpKey{Tenant: c.Tenant, Namespace: ledger.ConsumerNamespace(consumerName(s.b.kind, c)), Key: c.Key}
}

func (s *consumerSurface) Effects(_ testing.TB, marker string) int { return s.counter.count(marker) }

// Skips: a consumer has no approval setting (config.Consumer): a message
// is never held for a person. A JetStream message cannot be larger than
// the server's max_payload (1 MiB), the consumer's own bound: the broker
// refuses it at publish.
func (s *consumerSurface) Skips() map[string]string {
	skips := map[string]string{"ApprovalBoundToFingerprint": "a consumer has no approval setting: no message waits for a person"}
	if s.b.kind == "nats" {
		skips["InputBounded"] = "NATS refuses a message over max_payload (1 MiB), the consumer's bound, at publish"
	}
	return skips
}

func (s *consumerSurface) Down(t testing.TB) { s.flaky.Down(t) }

// Redelivers: a released message is delivered again by the broker.
func (s *consumerSurface) Redelivers() bool { return true }

func (s *consumerSurface) Up(t testing.TB) { s.flaky.Up(t) }

func (s *consumerSurface) Send(t testing.TB, c surfacetest.Call) surfacetest.Answer {
	if c.Oversize {
		return s.sendOversized(t, c)
	}
	return s.SendCopies(t, c, 1)[0]
}

// sendOversized publishes a body past the consumer's bound (1 MiB), which
// is parked before the executor sees it.
func (s *consumerSurface) sendOversized(t testing.TB, c surfacetest.Call) surfacetest.Answer {
	s.b.publish(t, consumerName(s.b.kind, c), c.Key, commandOf(c, contract.DefaultMaxBody))
	testenv.WaitFor(t, "the oversized message parked", func() bool { return s.b.parkedCopy(c.Key) != nil })
	a := surfacetest.Answer{Outcome: surfacetest.Other, Parked: s.b.parkedCopy(c.Key)}
	if a.Parked[inbox.ReasonHeader] == contract.CodePayloadTooLarge {
		a.Outcome = surfacetest.TooLarge
	}
	a.Body = []byte(fmt.Sprint(a.Parked))
	return a
}

// SendCopies publishes n copies of c and waits for the n observations.
func (s *consumerSurface) SendCopies(t testing.TB, c surfacetest.Call, n int) []surfacetest.Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := consumerName(s.b.kind, c)
	before := s.observed(t, name)
	for range n {
		s.b.publish(t, name, c.Key, command(c))
	}
	var after map[string]int
	testenv.WaitFor(t, fmt.Sprintf("%d messages of %s handled", n, name), func() bool {
		after = s.observed(t, name)
		return sum(after)-sum(before) >= n
	})
	var answers []surfacetest.Answer
	for outcome, k := range after {
		for range k - before[outcome] {
			answers = append(answers, s.answer(t, c, outcome))
		}
	}
	return answers
}

// answer is one handled message's outcome, by its observation and its
// operation; an unknown or conflicting one is waited for on the dead
// letter.
func (s *consumerSurface) answer(t testing.TB, c surfacetest.Call, outcome string) surfacetest.Answer {
	op, _ := s.store.GetByKey(context.Background(), s.Key(c))
	a := surfacetest.Answer{Outcome: surfacetest.Other} // a consumer has no answer to compare

	if op != nil {
		a.OpID = op.ID
	}
	switch {
	case op != nil && op.State == ledger.Unknown:
		a.Outcome = surfacetest.Unknown
	case outcome == contract.CodeFingerprintMismatch:
		a.Outcome = surfacetest.Refused
	case outcome == keyed.OutcomeReplayed:
		a.Outcome = surfacetest.Replayed
	case outcome == keyed.OutcomeCreated || outcome == keyed.OutcomeExecuted:
		// Run, and released unless it succeeded (the broker may be
		// delivering it again already: executing, or prepared).
		a.Outcome = surfacetest.Released
		if op != nil && op.State == ledger.Succeeded {
			a.Outcome = surfacetest.Executed
		}
	case outcome == contract.CodeUpstreamUnavailable:
		a.Outcome = surfacetest.Released
	case outcome == contract.CodeInProgress:
		a.Outcome = surfacetest.InProgress
	default:
		a.Body = []byte(outcome)
	}
	if a.Outcome == surfacetest.Unknown || a.Outcome == surfacetest.Refused {
		testenv.WaitFor(t, "the message parked", func() bool { return s.b.parkedCopy(c.Key) != nil })
		a.Parked = s.b.parkedCopy(c.Key)
	}
	return a
}

// observed is how many messages of consumer the executor answered, by
// outcome: the counts of the request histogram on the consumer's route.
// Read from the registry, not its text page: the tests poll this every
// 20 ms, and under -race formatting the page was 3% of the package's CPU.
func (s *consumerSurface) observed(t testing.TB, consumer string) map[string]int {
	families, err := s.g.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, f := range families {
		if f.GetName() != "idemgate_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == "consumer:"+consumer {
				n[labels["outcome"]] += int(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return n
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// runConsumers starts the gateway's consumers and waits until each
// consumes.
func (g *suiteGateway) runConsumers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.g.RunConsumers(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, b := range g.brokers {
		for _, c := range consumerCalls {
			series := fmt.Sprintf("\nidemgate_consumer_connected{consumer=%q} 1\n", consumerName(b.kind, c))
			testenv.WaitFor(t, "the consumers connected", func() bool {
				rec := httptest.NewRecorder()
				g.g.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				return strings.Contains(rec.Body.String(), series)
			})
		}
	}
}

func (g *suiteGateway) consumerSurfaces() []surfacetest.Surface {
	var s []surfacetest.Surface
	for _, b := range g.brokers {
		s = append(s, &consumerSurface{suiteGateway: g, b: b})
	}
	return s
}

// consumerCases are issue 30's case 4 on a NATS consumer: a message its
// upstream answered 500 is unknown, parked with its operation (never
// acknowledged and lost); one answered 503, which the consumer's outcomes
// say is not applied, is released and delivered again, then parked past
// max_deliveries.
func consumerCases(t *testing.T, g *suiteGateway) {
	var b *broker
	for _, x := range g.brokers {
		if x.kind == "nats" {
			b = x
		}
	}
	store := g.store
	t.Run("UpstreamAnswered500", func(t *testing.T) {
		key, marker := "c500-"+b.id, "m-c500-"+b.id
		b.publish(t, "nats-acme-s500", key, fmt.Sprintf(`{"case":%q}`, marker))
		testenv.WaitFor(t, "the message parked", func() bool { return b.parkedCopy(key) != nil })
		p := b.parkedCopy(key)
		op, err := store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.ConsumerNamespace("nats-acme-s500"), Key: key})
		if err != nil || op.State != ledger.Unknown || p["Idemgate-Parked-Reason"] != "unknown" || p["Idemgate-Operation"] != op.ID ||
			g.counter.count(marker) != 1 {
			t.Fatalf("parked %v, operation %+v %v, %d effects", p, op, err, g.counter.count(marker))
		}
	})
	t.Run("UpstreamAnswered503NotApplied", func(t *testing.T) {
		key, marker := "c503-"+b.id, "m-c503-"+b.id
		b.publish(t, "nats-acme-s503", key, fmt.Sprintf(`{"case":%q}`, marker))
		testenv.WaitFor(t, "the message parked", func() bool { return b.parkedCopy(key) != nil })
		p := b.parkedCopy(key)
		op, err := store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.ConsumerNamespace("nats-acme-s503"), Key: key})
		if err != nil || op.State != ledger.Prepared || p["Idemgate-Parked-Reason"] != "max_deliveries" || g.counter.count(marker) != 2 {
			t.Fatalf("parked %v, operation %+v %v, %d deliveries", p, op, err, g.counter.count(marker))
		}
	})
}
