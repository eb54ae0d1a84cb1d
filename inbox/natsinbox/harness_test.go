package natsinbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/inbox/inboxtest"
	"github.com/idemgate/idemgate/inbox/natsinbox"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// stream is a stream of the test's own, deleted at its end, with the
// subject of its dead letter, and that subject's stream once made.
type stream struct {
	t                        *testing.T
	url                      string
	js                       jetstream.JetStream
	name, subject, dead, dlq string
	deliveries               chan string // the keys delivered, in order
	stop                     func()      // stops the consumer run runs, and waits for it
	mu                       sync.Mutex
	conflicting              map[string]bool
}

func newStream(t *testing.T, url string) *stream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := strings.ToUpper(hex.EncodeToString(b[:]))
	s := &stream{t: t, url: url, js: js, name: "T_" + id, subject: "t." + id + ".in", dead: "t." + id + ".dead",
		dlq: "T_" + id + "_DEAD", deliveries: make(chan string, 100), conflicting: map[string]bool{}}
	s.create(s.name, s.subject)
	return s
}

// create makes a stream, deleted at the test's end.
func (s *stream) create(name, subject string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
		Storage: jetstream.FileStorage}); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = s.js.DeleteStream(context.Background(), name) })
}

// captureDeadLetter makes the dead letter's stream.
func (s *stream) captureDeadLetter() { s.create(s.dlq, s.dead) }

// dropDeadLetter deletes the dead letter's stream.
func (s *stream) dropDeadLetter() {
	s.t.Helper()
	if err := s.js.DeleteStream(context.Background(), s.dlq); err != nil {
		s.t.Fatal(err)
	}
}

// publish publishes body with headers, waiting for the stream.
func (s *stream) publish(body string, headers ...string) {
	s.t.Helper()
	m := nats.NewMsg(s.subject)
	m.Data = []byte(body)
	for i := 0; i+1 < len(headers); i += 2 {
		m.Header.Set(headers[i], headers[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		s.t.Fatal(err)
	}
}

// parked are the dead letter's messages so far, nil while it has no stream.
func (s *stream) parked() []*jetstream.RawStreamMsg {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, s.dlq)
	if err != nil {
		return nil
	}
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		if m, err := st.GetMsg(ctx, seq); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// Deliver implements inbox.Deliverer as an upstream that applies each
// key once: a key made conflicting is a fingerprint conflict.
func (s *stream) Deliver(_ context.Context, d inbox.Delivery) (inbox.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conflicting[d.Key] {
		return inbox.Outcome{OpID: "op-" + d.Key, Code: contract.CodeFingerprintMismatch, State: ledger.Succeeded}, nil
	}
	s.deliveries <- d.Key
	return inbox.Outcome{OpID: "op-" + d.Key, State: ledger.Succeeded}, nil
}

// conflict makes every later delivery of key a conflict.
func (s *stream) conflict(key string) {
	s.mu.Lock()
	s.conflicting[key] = true
	s.mu.Unlock()
}

// delivered waits for the next delivery and says its key.
func (s *stream) delivered() string {
	s.t.Helper()
	select {
	case k := <-s.deliveries:
		return k
	case <-time.After(testenv.Bound):
		s.t.Fatal("no delivery")
		return ""
	}
}

// run runs a consumer of the stream, keyed by the header Event-Id, until
// stop or the test's end; its log lines and what it reports are the
// test's.
func (s *stream) run(src natsinbox.Source) (*testenv.Logs, *inboxtest.Heard) {
	key, _ := inbox.ParseKeyFrom("header:Event-Id")
	l, h := &testenv.Logs{}, &inboxtest.Heard{}
	src.URL, src.Stream, src.Consumer, src.DeadLetter = s.url, s.name, "idemgate", s.dead
	src.Logger, src.Observer = slog.New(slog.NewJSONHandler(l, nil)), h
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = natsinbox.Run(ctx, src, &inbox.Consumer{Name: "billing", KeyFrom: key, Deliver: s,
			Backoff: func(int) time.Duration { return 100 * time.Millisecond }})
	}()
	s.stop = func() { cancel(); <-done }
	s.t.Cleanup(s.stop)
	return l, h
}
