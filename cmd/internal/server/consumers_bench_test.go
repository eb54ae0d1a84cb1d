package server_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/inbox/amqpinbox"
	"github.com/idemgate/idemgate/inbox/natsinbox"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// BenchmarkConsumer measures messages per second through a JetStream
// consumer, each message an operation through the gateway's keyed path
// (reserve, forward, record), beside its floor: the same consumer loop
// whose deliverer calls the same upstream with no ledger. Both stores, at
// concurrency 1, 16 and 64. b.N messages are published before the clock
// starts; it stops when the upstream has made b.N effects.
func BenchmarkConsumer(b *testing.B) {
	url := testenv.RequireNATS(b)
	dbtest.Each(b, func(b *testing.B, db dbtest.DB) {
		gw := newGateway(b, db)
		for _, conc := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("concurrency=%d/bare", conc), func(b *testing.B) {
				up := newCountingUpstream(b)
				benchConsumer(b, url, conc, up, bareDeliverer{url: up.srv.URL + "/v1/invoices"}, nil)
			})
			b.Run(fmt.Sprintf("concurrency=%d/idemgate", conc), func(b *testing.B) {
				benchConsumer(b, url, conc, gw.up, gw.d, gw.store)
			})
		}
	})
}

// BenchmarkAMQPConsumer is BenchmarkConsumer on a RabbitMQ queue (a
// classic durable queue, persistent messages): the gateway's keyed path
// beside the same consumer loop with no ledger, on both stores, at
// concurrency 1 and 16.
func BenchmarkAMQPConsumer(b *testing.B) {
	url := testenv.RequireAMQP(b)
	dbtest.Each(b, func(b *testing.B, db dbtest.DB) {
		gw := newGateway(b, db)
		for _, conc := range []int{1, 16} {
			b.Run(fmt.Sprintf("concurrency=%d/bare", conc), func(b *testing.B) {
				up := newCountingUpstream(b)
				benchAMQPConsumer(b, url, conc, up, bareDeliverer{url: up.srv.URL + "/v1/invoices"}, nil)
			})
			b.Run(fmt.Sprintf("concurrency=%d/idemgate", conc), func(b *testing.B) {
				benchAMQPConsumer(b, url, conc, gw.up, gw.d, gw.store)
			})
		}
	})
}

// countingUpstream answers every POST with 201, counting them; expect
// arms the event of the n-th.
type countingUpstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	effects int64
	want    int64
	reached chan struct{}
}

func newCountingUpstream(b *testing.B) *countingUpstream {
	u := &countingUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		if u.effects++; u.effects == u.want {
			close(u.reached)
		}
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"INV-1"}`))
	}))
	b.Cleanup(u.srv.Close)
	return u
}

// expect counts from zero again and returns a channel closed at the n-th
// effect.
func (u *countingUpstream) expect(n int) <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.effects, u.want, u.reached = 0, int64(n), make(chan struct{})
	return u.reached
}

// bareDeliverer is the floor: the upstream called, nothing recorded.
type bareDeliverer struct{ url string }

var bareClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func (d bareDeliverer) Deliver(ctx context.Context, dl inbox.Delivery) (inbox.Outcome, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(dl.Body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := bareClient.Do(req)
	if err != nil {
		return inbox.Outcome{}, err
	}
	resp.Body.Close()
	return inbox.Outcome{State: ledger.Succeeded}, nil
}

// gateway is one server on a store, with its consumer's deliverer and
// the upstream it delivers to, shared by a store's sub-benchmarks. One
// per store, not one per run: go test runs a sub-benchmark's function
// once with b.N = 1 and again with the full count, and a server made in
// each would have two servers, their writers and their background work
// (the audit sealer above all) on one SQLite file, contending for its
// write lock.
type gateway struct {
	up    *countingUpstream
	d     inbox.Deliverer
	store ledger.Store
}

func newGateway(b *testing.B, db dbtest.DB) *gateway {
	up := newCountingUpstream(b)
	d, store := gatewayDeliverer(b, db, up.srv.URL)
	return &gateway{up: up, d: d, store: store}
}

// gatewayDeliverer is a server's consumer deliverer on db, and its store.
func gatewayDeliverer(b *testing.B, db dbtest.DB, upstream string) (inbox.Deliverer, ledger.Store) {
	path := filepath.Join(b.TempDir(), "gw.yaml")
	text := fmt.Sprintf(`store: %s
upstreams:
  billing: {url: %s, timeout: 5s, forward_key: true, max_conns: 64}
consumers:
  - {name: billing, tenant: acme, source: {nats: "nats://127.0.0.1:4222", stream: S, consumer: c},
     key_from: body:/event_id, deliver: {upstream: billing, path: /v1/invoices}, dead_letter: {subject: dead}}
`+unlimited, db.DSN, upstream)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg, err := config.LoadConsumers(path)
	if err != nil {
		b.Fatal(err)
	}
	store := db.Open(b)
	s, err := server.New(cfg, store, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s.Deliverer("billing"), store
}

// reportCommits reports the store's group commits over the timed part of
// a run (nil: a bare consumer, no store): the steps that shared a commit,
// what a commit took, and the share of the run the commits took, which on
// SQLite's one writer is its busy share.
func reportCommits(b *testing.B, store ledger.Store, before ledger.CommitStats) {
	if store == nil {
		return
	}
	after := store.CommitStats()
	commits, steps, took := after.Commits-before.Commits, after.Steps-before.Steps, after.Time-before.Time
	if commits == 0 {
		return
	}
	b.ReportMetric(float64(steps)/float64(commits), "steps/commit")
	b.ReportMetric(took.Seconds()*1000/float64(commits), "ms/commit")
	b.ReportMetric(took.Seconds()/b.Elapsed().Seconds(), "commit-share")
}

func benchConsumer(b *testing.B, url string, conc int, up *countingUpstream, d inbox.Deliverer, store ledger.Store) {
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	name := fmt.Sprintf("BENCH_%d", time.Now().UnixNano())
	for stream, subject := range map[string]string{name: name, name + "_DEAD": name + ".dead"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
			b.Fatal(err)
		}
		defer js.DeleteStream(ctx, stream)
	}
	for i := range b.N {
		if _, err := js.PublishAsync(name, fmt.Appendf(nil, `{"event_id":"%s-%d","amount":%d}`, name, i, i)); err != nil {
			b.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	consume(b, up, d, store, func(ctx context.Context, c *inbox.Consumer) {
		_ = natsinbox.Run(ctx, natsinbox.Source{URL: url, Stream: name, Consumer: "bench", DeadLetter: name + ".dead",
			Concurrency: conc}, c)
	}, func() uint64 { return parkedNATS(b, js, name+"_DEAD") })
}

// consume runs a consumer of the published b.N messages with run (the
// broker's Run, until its context ends) and times it until the upstream
// has made b.N effects. parked is read every 100 ms: a message on the
// dead letter will never make its effect, and the run fails then instead
// of waiting for ever (a refusal that parks, as a tenant's rate did).
func consume(b *testing.B, up *countingUpstream, d inbox.Deliverer, store ledger.Store,
	run func(context.Context, *inbox.Consumer), parked func() uint64) {
	key, _ := inbox.ParseKeyFrom("body:/event_id")
	c := &inbox.Consumer{Name: "bench", KeyFrom: key, Deliver: d, MaxDeliveries: 5}
	reached := up.expect(b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	var before ledger.CommitStats
	if store != nil {
		before = store.CommitStats()
	}
	b.ResetTimer()
	go func() { defer close(done); run(ctx, c) }()
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	for waiting := true; waiting; {
		select {
		case <-reached:
			waiting = false
		case <-check.C:
			if n := parked(); n > 0 {
				b.Fatalf("%d messages parked: the benchmark would wait for their effects for ever", n)
			}
		}
	}
	b.StopTimer()
	reportCommits(b, store, before)
	cancel()
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// parkedNATS counts the messages on a JetStream dead letter stream.
func parkedNATS(b *testing.B, js jetstream.JetStream, stream string) uint64 {
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return info.State.Msgs
}

func benchAMQPConsumer(b *testing.B, url string, conc int, up *countingUpstream, d inbox.Deliverer,
	store ledger.Store) {
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	name := fmt.Sprintf("bench.%d", time.Now().UnixNano())
	for _, q := range []string{name, name + ".dead"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
		defer ch.QueueDelete(q, false, false, false)
	}
	publishConfirmed(b, ch, name)
	consume(b, up, d, store, func(ctx context.Context, c *inbox.Consumer) {
		_ = amqpinbox.Run(ctx, amqpinbox.Source{URL: url, Queue: name, RoutingKey: name + ".dead",
			Concurrency: conc}, c)
	}, func() uint64 {
		q, err := ch.QueueDeclarePassive(name+".dead", true, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		return uint64(q.Messages)
	})
}

// publishConfirmed publishes b.N persistent messages to queue and returns
// once the broker has confirmed every one: they are all in the queue.
func publishConfirmed(b *testing.B, ch *amqp.Channel, queue string) {
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := make([]*amqp.DeferredConfirmation, b.N)
	for i := range b.N {
		var err error
		confirms[i], err = ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json",
				Body: fmt.Appendf(nil, `{"event_id":"%s-%d","amount":%d}`, queue, i, i)})
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range confirms {
		if !c.Wait() {
			b.Fatal("the broker refused a message")
		}
	}
}
