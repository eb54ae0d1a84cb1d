package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The consumer process is SIGKILLed while the upstream applies a
// delivery (the effect is made, the answer never recorded), then started
// again: the redelivery makes no second effect, and the operation is
// unknown (its lease lapsed with the effect possibly made) or succeeded.
func TestNATSConsumerKilledDuringDelivery(t *testing.T) {
	t.Parallel()
	url := testenv.RequireNATS(t)
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		up, s := newInvoices(t), newJSStream(t, url)
		cfg := consumerConfig(t, db.DSN, up.srv.URL, s.consumerYAML("body:/event_id", "    lease: 1s\n"))
		killedDuringDelivery(t, db, up, cfg, func() { s.publish("m-1", `{"event_id":"evt-killed"}`) }, s.settled)
	})
}

// The broker (a nats-server of the test's own, with its own port and
// data) restarts while the consumer works through a stream: the consumer
// reconnects by itself, and every message makes its effect once.
func TestNATSBrokerRestartMidStream(t *testing.T) {
	t.Parallel()
	srv := testenv.PrivateNATS(t)
	up, s := newInvoices(t), newJSStream(t, srv.URL)
	up.delay = 10 * time.Millisecond
	// A lease of 1s: a message whose acknowledgement the stopped server
	// never got is delivered again after AckWait, twice the lease.
	startConsume(t, consumerConfig(t, dbtest.SQLiteDB(t).DSN, up.srv.URL, s.consumerYAML("body:/event_id",
		"    concurrency: 2\n    lease: 1s\n")))
	const n = 40
	paused, resume := up.pauseAfter(10)
	for i := range n {
		s.publish("", fmt.Sprintf(`{"event_id":"evt-%d","seq":%d}`, i, i))
	}
	waitFor(t, "two deliveries in flight", paused)
	srv.Stop()
	time.Sleep(300 * time.Millisecond)
	srv.Start()
	resume()
	waitFor(t, "every message applied after the restart", func() bool { return len(up.perEvent()) == n })
	waitFor(t, "every message acknowledged", s.settled)
	for event, k := range up.perEvent() {
		if k != 1 {
			t.Errorf("%s: %d effects, want 1", event, k)
		}
	}
}
