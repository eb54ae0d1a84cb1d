package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// TestConsumersAreMeasured: /metrics says each consumer's parks by
// reason and whether it is consuming, from the configuration's consumers
// at start; a reload has each consumer look at its dead letter again, and
// one deleted since stops the consuming, said in the log and the gauge.
func TestConsumersAreMeasured(t *testing.T) {
	url := testenv.RequireNATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	id := fmt.Sprint(time.Now().UnixNano())
	stream, subject, dead := "MEASURED_"+id, "measured."+id+".in", "measured."+id+".dead"
	for name, subj := range map[string]string{stream: subject, stream + "_DEAD": dead} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	}
	up, db := newUpstream(t), dbtest.SQLiteDB(t)
	path := filepath.Join(t.TempDir(), "gw.yaml")
	text := fmt.Sprintf(`store: %s
upstreams:
  ops: {url: %s}
routes:
  - {match: POST /v1/tickets, upstream: ops}
consumers:
  - {name: billing, tenant: acme, source: {nats: %q, stream: %s, consumer: c, subject: %q},
     key_from: header:Event-Id, deliver: {upstream: ops, path: /v1/tickets}, dead_letter: {subject: %q}}
`, db.DSN, up.srv.URL, url, stream, subject, dead)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.Logs{}
	s, err := server.New(cfg, db.Open(t), slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	scraped := func(series string) func() bool {
		return func() bool {
			rec := httptest.NewRecorder()
			s.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			body, _ := io.ReadAll(rec.Body)
			return strings.Contains(string(body), "\n"+series+"\n")
		}
	}
	run, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.RunConsumers(run) }()
	t.Cleanup(func() { stop(); <-done })
	testenv.WaitFor(t, "the consumer connected", scraped(`idemgate_consumer_connected{consumer="billing"} 1`))
	if _, err := js.Publish(ctx, subject, []byte(`{"amount":5}`)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the park counted", scraped(`idemgate_consumer_parked_total{consumer="billing",reason="no_identity"} 1`))
	if err := js.DeleteStream(ctx, stream+"_DEAD"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the refusal logged", func() bool { return logs.Line("dead letter", dead, "captured by no stream") != "" })
	testenv.WaitFor(t, "the consumer reported down", scraped(`idemgate_consumer_connected{consumer="billing"} 0`))
}
