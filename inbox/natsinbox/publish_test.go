package natsinbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgate/idemgate/inbox/natsinbox"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/outbox"
)

// The outbox's relay publishes each effect of target nats:SUBJECT to
// JetStream with Nats-Msg-Id set to its derived key, and a publish the
// relay repeats (it crashed after the PubAck, before recording it) is
// dropped by the stream's duplicate window: one message per effect.
func TestRelayPublishesToJetStream(t *testing.T) {
	url := testenv.RequireNATS(t)
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		nc, err := natsinbox.Connect(url, t.Name())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		ctx := context.Background()
		stream, subject := fmt.Sprintf("OUTBOX_%d", time.Now().UnixNano()), fmt.Sprintf("outbox.%d", time.Now().UnixNano())
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject},
			Duplicates: time.Minute}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
		s := db.Open(t)
		target := natsinbox.TargetPrefix + subject
		var effects []outbox.Effect
		for i := range 3 {
			effects = append(effects, outbox.Effect{Tenant: "acme", OperationKey: "order-7", Name: fmt.Sprintf("step-%d", i),
				Target: target, Method: "POST", Path: "/", Body: []byte(fmt.Sprintf(`{"step":%d}`, i))})
		}
		enqueued, err := outbox.Enqueue(ctx, s, effects...)
		if err != nil {
			t.Fatal(err)
		}
		pub := natsinbox.Publisher{JS: js, Subject: subject}
		r := &outbox.Relay{Store: s, Targets: map[string]outbox.Target{target: {Sender: pub, Timeout: 2 * time.Second}},
			Lease: 5 * time.Second, Backoff: func(int) time.Duration { return 0 }}
		for range 5 {
			if _, err := r.Once(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// The relay's repeat after a crash: the same effect, the same key.
		again := pub.Send(ctx, enqueued[0], enqueued[0].UpstreamKey())
		if again.State != ledger.Succeeded {
			t.Fatalf("repeated publish: %+v", again)
		}
		info, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if n := info.CachedInfo().State.Msgs; n != 3 {
			t.Fatalf("%d messages in the stream, want 3", n)
		}
		for i, e := range effectsOf(t, s) {
			msg, err := info.GetMsg(ctx, uint64(i+1))
			if err != nil {
				t.Fatal(err)
			}
			if e.State != ledger.Succeeded || msg.Header.Get(jetstream.MsgIDHeader) != "acme:order-7/step-"+fmt.Sprint(i) {
				t.Fatalf("effect %+v, message %v", e, msg.Header)
			}
		}
	})
}

func effectsOf(t *testing.T, s ledger.Store) []*ledger.Effect {
	es, err := s.Effects(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
		Key: "order-7"})
	if err != nil {
		t.Fatal(err)
	}
	return es
}
