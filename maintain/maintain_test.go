package maintain_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/maintain"
	"github.com/idemgate/idemgate/reconcile"
)

// eachStore runs fn on a fresh store of each kind.
func eachStore(t *testing.T, fn func(t *testing.T, s ledger.Store)) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) { fn(t, db.Open(t)) })
}

// run runs the maintenance plane until the returned stop, which waits
// for Run to return (stop is also called when t ends).
func run(t *testing.T, s maintain.Store, o maintain.Options) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		maintain.Run(ctx, s, o)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// fast paces every job in milliseconds.
func fast() maintain.Options {
	return maintain.Options{SweepInterval: 5 * time.Millisecond, PurgeInterval: 5 * time.Millisecond}
}

// waitFor waits until cond holds, failing t after a generous deadline:
// it asserts an effect, never how long it took.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
	}
}

func ctx() context.Context { return context.Background() }

// reserve reserves a new operation of tenant acme (executing when lease
// > 0), failing t on error.
func reserve(t *testing.T, s ledger.Store, key string, lease, retention time.Duration, probe string) ledger.Reservation {
	t.Helper()
	r, err := s.Reserve(ctx(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: key, Route: "POST /v1/x/{id}",
		Fingerprint: "sha256:aa", Lease: lease, Retention: retention, Actor: "test", Probe: probe})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// done reserves an operation and completes it, succeeded.
func done(t *testing.T, s ledger.Store, key string, retention time.Duration) *ledger.Operation {
	t.Helper()
	r := reserve(t, s, key, time.Hour, retention, "")
	op, err := s.Complete(ctx(), *r.Lease, ledger.Outcome{State: ledger.Succeeded,
		Response: &ledger.Response{Status: 201, Body: []byte(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// unknown reserves an operation and marks it unknown.
func unknown(t *testing.T, s ledger.Store, key string, retention time.Duration, probe string) *ledger.Operation {
	t.Helper()
	r := reserve(t, s, key, time.Hour, retention, probe)
	op, err := s.MarkUnknown(ctx(), *r.Lease, ledger.Note{Reason: "connection lost"})
	if err != nil {
		t.Fatal(err)
	}
	return op
}

// waiting reserves an operation waiting for an approval that lapses at
// once.
func waiting(t *testing.T, s ledger.Store, key string) *ledger.Operation {
	t.Helper()
	r, err := s.Reserve(ctx(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: key, Route: "POST /v1/deploys",
		Fingerprint: "sha256:bb", Retention: time.Hour, Actor: "test",
		Approval: &ledger.ApprovalRequest{Target: "POST /v1/deploys", Summary: "deploy", Command: []byte(`{}`),
			RequestedBy: "agent", Approvers: []string{"approver"}, TTL: ledger.MinDuration, ValidFor: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	return r.Op
}

func state(t *testing.T, s ledger.Store, id string) ledger.State {
	t.Helper()
	op, err := s.Get(ctx(), id)
	if err != nil {
		t.Fatal(err)
	}
	return op.State
}

func gone(t *testing.T, s ledger.Store, id string) bool {
	t.Helper()
	_, err := s.Get(ctx(), id)
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		t.Fatal(err)
	}
	return err != nil
}

func approvalStatus(t *testing.T, s ledger.Store, op *ledger.Operation) ledger.ApprovalStatus {
	t.Helper()
	a, err := s.GetApproval(ctx(), op.Approval.ID)
	if err != nil {
		t.Fatal(err)
	}
	return a.Status
}

// TestLapsedLease: an executing operation whose lease lapsed becomes
// unknown (never free), and the hook hears it.
func TestLapsedLease(t *testing.T) {
	eachStore(t, func(t *testing.T, s ledger.Store) {
		lapsed := reserve(t, s, "k-lapsed", ledger.MinDuration, time.Hour, "").Op
		held := reserve(t, s, "k-held", time.Hour, time.Hour, "").Op
		var expired atomic.Int64
		o := fast()
		o.OnLeasesExpired = func(n int) { expired.Add(int64(n)) }
		stop := run(t, s, o)
		waitFor(t, "the lapsed lease expired, and counted", func() bool {
			return state(t, s, lapsed.ID) == ledger.Unknown && expired.Load() == 1
		})
		stop()
		if st := state(t, s, held.ID); st != ledger.Executing || expired.Load() != 1 {
			t.Fatalf("a lease still held: %s; expired %d", st, expired.Load())
		}
	})
}

// TestExpiredApproval: an approval past its time is expired, and the
// hook hears it; a pending one within its time is not.
func TestExpiredApproval(t *testing.T) {
	eachStore(t, func(t *testing.T, s ledger.Store) {
		op := waiting(t, s, "k-deploy")
		var expired atomic.Int64
		o := fast()
		o.OnApprovalsExpired = func(n int) { expired.Add(int64(n)) }
		stop := run(t, s, o)
		waitFor(t, "the approval expired, and counted", func() bool {
			return approvalStatus(t, s, op) == ledger.ApprovalExpired && expired.Load() == 1
		})
		stop()
		if st := state(t, s, op.ID); st != ledger.Prepared {
			t.Fatalf("its operation: %s", st)
		}
	})
}

// TestPurge: an operation past its retention is purged, and the hook
// hears it; executing and unknown ones past theirs are kept, as is a
// final one within its retention.
func TestPurge(t *testing.T) {
	eachStore(t, func(t *testing.T, s ledger.Store) {
		old := done(t, s, "k-old", ledger.MinDuration)
		recent := done(t, s, "k-recent", time.Hour)
		executing := reserve(t, s, "k-executing", time.Hour, ledger.MinDuration, "").Op
		unsure := unknown(t, s, "k-unknown", ledger.MinDuration, "")
		var purged atomic.Int64
		o := fast()
		o.OnPurged = func(n int) { purged.Add(int64(n)) }
		stop := run(t, s, o)
		waitFor(t, "the old operation purged, and counted", func() bool {
			return gone(t, s, old.ID) && purged.Load() == 1
		})
		stop()
		for _, op := range []*ledger.Operation{recent, executing, unsure} {
			if gone(t, s, op.ID) {
				t.Fatalf("%s (%s) was purged", op.Key, op.State)
			}
		}
		if purged.Load() != 1 {
			t.Fatalf("purged %d", purged.Load())
		}
	})
}

// TestFinalSeal: events recorded while the sealer idles are sealed once
// the context ends, before Run returns: a service stopped gracefully
// leaves its events sealed.
func TestFinalSeal(t *testing.T) {
	eachStore(t, func(t *testing.T, s ledger.Store) {
		log := &countedLog{Log: s}
		sealer := &audit.Sealer{Log: log, Signing: audit.Signing{Name: "maintain-test"}, Idle: time.Hour}
		stop := run(t, s, maintain.Options{Sealer: sealer})
		waitFor(t, "the sealer's first round", func() bool { return log.rounds.Load() > 0 })
		op := done(t, s, "k-sealed", time.Hour) // the sealer idles for an hour meanwhile
		if n := unsealed(t, s, op.ID); n == 0 {
			t.Fatal("no event to seal: the test proves nothing")
		}
		stop()
		if n := unsealed(t, s, op.ID); n != 0 || log.rounds.Load() < 2 {
			t.Fatalf("%d events unsealed after Run returned; %d rounds", n, log.rounds.Load())
		}
	})
}

// TestFlushBeforeTheFinalSeal: at the stop, every job ends first, then
// Flush writes what the caller's batcher holds, then the final seal
// covers it: an event still queued at the stop is sealed once Run
// returns, and nothing records into a closed batcher.
func TestFlushBeforeTheFinalSeal(t *testing.T) {
	eachStore(t, func(t *testing.T, s ledger.Store) {
		log := &countedLog{Log: s}
		sealer := &audit.Sealer{Log: log, Signing: audit.Signing{Name: "maintain-test"}, Idle: time.Hour}
		events := ledger.NewEventBatcher(s, time.Hour, nil) // nothing written before Flush
		stop := run(t, s, maintain.Options{Sealer: sealer, Flush: events.Close})
		waitFor(t, "the sealer's first round", func() bool { return log.rounds.Load() > 0 })
		op := done(t, s, "k-flushed", time.Hour)
		events.Record(audit.Event{Tenant: op.Tenant, OperationID: op.ID, Kind: audit.Replayed, Key: op.Key,
			Fingerprint: op.Fingerprint})
		before, err := s.AuditEvents(ctx(), ledger.AuditParams{OperationID: op.ID})
		if err != nil {
			t.Fatal(err)
		}
		stop()
		after, err := s.AuditEvents(ctx(), ledger.AuditParams{OperationID: op.ID})
		if err != nil || len(after) != len(before)+1 || unsealed(t, s, op.ID) != 0 {
			t.Fatalf("%d events before the stop, %d after (%v); %d unsealed", len(before), len(after), err,
				unsealed(t, s, op.ID))
		}
	})
}

// countedLog counts the sealer's rounds, once each is over.
type countedLog struct {
	audit.Log
	rounds atomic.Int64
}

func (l *countedLog) SealAudit(ctx context.Context, fn func(audit.SealTx) error) (bool, error) {
	defer l.rounds.Add(1)
	return l.Log.SealAudit(ctx, fn)
}

// unsealed counts an operation's unsealed events.
func unsealed(t *testing.T, s ledger.Store, opID string) int {
	t.Helper()
	evs, err := s.AuditEvents(ctx(), ledger.AuditParams{OperationID: opID})
	if err != nil || len(evs) == 0 {
		t.Fatalf("events: %d, %v", len(evs), err)
	}
	n := 0
	for _, e := range evs {
		if e.Seq < 0 {
			n++
		}
	}
	return n
}

// captured is a reconciler whose probe finds every payment captured.
func captured(t *testing.T, s ledger.Store, probes *atomic.Int64) *reconcile.Reconciler {
	p, err := reconcile.Compile(reconcile.Config{Probe: "GET /v1/x/{{.params.id}}",
		Applied: `body.status == "captured"`, NotApplied: `body.status == "requires_capture"`})
	if err != nil {
		t.Fatal(err)
	}
	return &reconcile.Reconciler{Store: s, Probes: map[string]*reconcile.Probe{"POST /v1/x/{id}": p},
		Send: func(context.Context, string, string, string) (reconcile.Answer, error) {
			probes.Add(1)
			return reconcile.Answer{Status: 200, Header: http.Header{"Content-Type": {"application/json"}},
				Body: []byte(`{"status":"captured"}`)}, nil
		}}
}

// TestReconciler: a reconciler with probes runs, and settles an unknown
// operation its probe proves applied.
func TestReconciler(t *testing.T) {
	eachStore(t, func(t *testing.T, s ledger.Store) {
		op := unknown(t, s, "k-capture", time.Hour, "GET /v1/x/1")
		var probes atomic.Int64
		run(t, s, maintain.Options{Reconciler: captured(t, s, &probes)})
		waitFor(t, "the probe's verdict", func() bool { return state(t, s, op.ID) == ledger.Succeeded })
		if probes.Load() != 1 {
			t.Fatalf("%d probes", probes.Load())
		}
	})
}

// TestOnce: one pass runs every job to completion, in an order where
// each sees what the one before did: a lapsed lease is made unknown,
// then probed and settled; then the purge; then every event is sealed.
// The hooks hear the counts.
func TestOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s ledger.Store) {
		lapsed := reserve(t, s, "k-lapsed", ledger.MinDuration, time.Hour, "GET /v1/x/7").Op
		deploy := waiting(t, s, "k-deploy")
		old := done(t, s, "k-old", ledger.MinDuration)
		var probes atomic.Int64
		heard := map[string]int{}
		hook := func(name string) func(int) { return func(n int) { heard[name] += n } }
		got, err := maintain.Once(ctx(), s, maintain.Options{Reconciler: captured(t, s, &probes),
			Sealer:          &audit.Sealer{Log: s, Signing: audit.Signing{Name: "maintain-test"}},
			OnLeasesExpired: hook("leases"), OnApprovalsExpired: hook("approvals"), OnPurged: hook("purged")})
		if err != nil {
			t.Fatal(err)
		}
		if got.LeasesExpired != 1 || got.ApprovalsExpired != 1 || got.Settled != 1 || got.Purged != 1 ||
			got.Sealed == 0 || probes.Load() != 1 {
			t.Fatalf("counts %+v, probes %d", got, probes.Load())
		}
		if fmt.Sprint(heard) != "map[approvals:1 leases:1 purged:1]" {
			t.Fatalf("hooks heard %v", heard)
		}
		if st := state(t, s, lapsed.ID); st != ledger.Succeeded {
			t.Fatalf("the lapsed operation: %s", st)
		}
		if approvalStatus(t, s, deploy) != ledger.ApprovalExpired || !gone(t, s, old.ID) {
			t.Fatal("the approval not expired, or the old operation not purged")
		}
		for _, id := range []string{lapsed.ID, deploy.ID} {
			if n := unsealed(t, s, id); n != 0 {
				t.Fatalf("%d events of %s unsealed", n, id)
			}
		}
	})
}
