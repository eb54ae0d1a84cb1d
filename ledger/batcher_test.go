package ledger_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// TestEventBatcherCoalesces: a retry storm (one run, one key, one request,
// answered alike) is written as one event per batch saying how many
// requests it stands for; a request that differs in anything but its time
// keeps an event of its own; Close writes what is queued.
func TestEventBatcherCoalesces(t *testing.T) {
	s := dbtest.SQLite(t)
	b := ledger.NewEventBatcher(s, time.Hour, nil)       // one batch, written at Close
	start := time.Now().UTC().Truncate(time.Microsecond) // a store's resolution
	replay := audit.Event{Tenant: "acme", OperationID: "op_1", Kind: audit.Replayed, RunID: "run-1", Key: "k",
		Fingerprint: "sha256:aa", UpstreamStatus: 201}
	for i := range 100 {
		replay.At = start.Add(time.Duration(i) * time.Millisecond)
		b.Record(replay)
	}
	other := replay
	other.RunID, other.At = "run-2", start
	b.Record(other)
	b.Record(audit.Event{Tenant: "acme", Kind: audit.Succeeded}) // a transition's kind: refused, nothing lost
	b.Close()
	es, err := s.AuditEvents(context.Background(), ledger.AuditParams{Tenant: "acme"})
	if err != nil || len(es) != 2 {
		t.Fatalf("events %+v %v", es, err)
	}
	last := start.Add(99 * time.Millisecond).Format("2006-01-02T15:04:05.000000Z")
	if es[0].RunID != "run-1" || !es[0].At.Equal(start) || es[0].Reason != "100 requests, the last at "+last {
		t.Fatalf("the storm: %+v", es[0])
	}
	if es[1].RunID != "run-2" || strings.Contains(es[1].Reason, "requests") {
		t.Fatalf("another run's replay: %+v", es[1])
	}
}

// TestEventBatcherRecordAfterClose: a Record that comes after Close (a
// shutdown out of order) is dropped and logged; it never crashes the
// process, and Close may be called again.
func TestEventBatcherRecordAfterClose(t *testing.T) {
	s := dbtest.SQLite(t)
	var logs strings.Builder
	b := ledger.NewEventBatcher(s, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)))
	b.Close()
	b.Record(audit.Event{Tenant: "acme", OperationID: "op_late", Kind: audit.Replayed, Key: "k"})
	b.Close()
	if !strings.Contains(logs.String(), "after the batcher closed") || !strings.Contains(logs.String(), "op_late") {
		t.Fatalf("the late event was not said: %q", logs.String())
	}
}
