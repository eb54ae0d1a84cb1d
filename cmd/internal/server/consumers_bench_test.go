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
	"sync/atomic"
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
				gw.up.effects.Store(0)
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
				gw.up.effects.Store(0)
				benchAMQPConsumer(b, url, conc, gw.up, gw.d, gw.store)
			})
		}
	})
}

// countingUpstream answers every POST with 201, counting them.
type countingUpstream struct {
	srv     *httptest.Server
	effects atomic.Int64
}

func newCountingUpstream(b *testing.B) *countingUpstream {
	u := &countingUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.effects.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"INV-1"}`))
	}))
	b.Cleanup(u.srv.Close)
	return u
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
	key, _ := inbox.ParseKeyFrom("body:/event_id")
	c := &inbox.Consumer{Name: "bench", KeyFrom: key, Deliver: d, MaxDeliveries: 5}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	var before ledger.CommitStats
	if store != nil {
		before = store.CommitStats()
	}
	b.ResetTimer()
	go func() {
		defer close(done)
		_ = natsinbox.Run(runCtx, natsinbox.Source{URL: url, Stream: name, Consumer: "bench", DeadLetter: name + ".dead",
			Concurrency: conc}, c)
	}()
	for i := 0; up.effects.Load() < int64(b.N); i++ {
		time.Sleep(time.Millisecond)
		if i%100 == 0 {
			failIfParked(b, js, name+"_DEAD")
		}
	}
	b.StopTimer()
	reportCommits(b, store, before)
	cancel()
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// failIfParked ends the benchmark once a message reached the dead letter:
// its effect will never come, and waiting for b.N effects would not end.
// A refusal that parks a message (a tenant's rate, before unlimited) is
// what this catches.
func failIfParked(b *testing.B, js jetstream.JetStream, stream string) {
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if info.State.Msgs > 0 {
		b.Fatalf("%d messages parked: the benchmark would wait for their effects for ever", info.State.Msgs)
	}
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
	for i := range b.N {
		if err := ch.PublishWithContext(context.Background(), "", name, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/json",
			Body: fmt.Appendf(nil, `{"event_id":"%s-%d","amount":%d}`, name, i, i)}); err != nil {
			b.Fatal(err)
		}
	}
	for ready := 0; ready < b.N; time.Sleep(time.Millisecond) {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		ready = q.Messages
	}
	key, _ := inbox.ParseKeyFrom("body:/event_id")
	c := &inbox.Consumer{Name: "bench", KeyFrom: key, Deliver: d, MaxDeliveries: 5}
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	var before ledger.CommitStats
	if store != nil {
		before = store.CommitStats()
	}
	b.ResetTimer()
	go func() {
		defer close(done)
		_ = amqpinbox.Run(runCtx, amqpinbox.Source{URL: url, Queue: name, RoutingKey: name + ".dead",
			Concurrency: conc}, c)
	}()
	for i := 0; up.effects.Load() < int64(b.N); i++ {
		time.Sleep(time.Millisecond)
		if i%100 == 0 {
			if q, err := ch.QueueDeclarePassive(name+".dead", true, false, false, false, nil); err != nil {
				b.Fatal(err)
			} else if q.Messages > 0 {
				b.Fatalf("%d messages parked: the benchmark would wait for their effects for ever", q.Messages)
			}
		}
	}
	b.StopTimer()
	reportCommits(b, store, before)
	cancel()
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
