package storetest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// Floor is the raw floor a store is measured against: the minimal SQL that
// does the same job by hand on the same database, with no history, no
// fencing and no domain code.
type Floor interface {
	// Lifecycle inserts (tenant, key) if absent and then updates it with the
	// response: two statements, two commits.
	Lifecycle(ctx context.Context, tenant, key string, status int, body []byte) error
	// Lookup reads the stored response of (tenant, key).
	Lookup(ctx context.Context, tenant, key string) error
}

// BenchWorkers is the concurrency of the parallel benchmarks: more callers
// than connections, as under load.
const BenchWorkers = 16

// benchResponse is a typical stored answer: a small JSON body and two headers.
var benchResponse = &ledger.Response{Status: 201,
	Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/tickets/T-1042"}},
	Body: []byte(`{"id":"T-1042","project":"ops","title":"Disk full on db-3","priority":2,` +
		`"status":"open","created":true,"url":"https://tickets.example/T-1042"}`)}

var benchSeq atomic.Int64

func benchKey() string { return fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), benchSeq.Add(1)) }

// ledgerLifecycle is the common write path: reserve with a lease, complete.
func ledgerLifecycle(c context.Context, s ledger.Store, key string) error {
	r, err := s.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: key, Route: "/v1/tickets",
		Fingerprint: "sha256:5f1c0a", Lease: 30 * time.Second, Retention: Retention, Actor: "bench"})
	if err != nil {
		return err
	}
	if !r.Owned() {
		return fmt.Errorf("bench key %s not new", key)
	}
	_, err = s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: benchResponse, Reason: "201"})
	return err
}

// BenchLifecycle measures the common write path against the floor in one
// run. Serial: the two alternate call by call (see alternate), so drift and
// noise hit both alike. Parallel: BenchWorkers callers run b.N lifecycles, first through the
// store, then through the floor. Both report µs per operation and the ratio.
func BenchLifecycle(b *testing.B, s ledger.Store, f Floor) {
	c := context.Background()
	b.Run("serial", func(b *testing.B) {
		ours, raw := alternate(b,
			func(int) error { return ledgerLifecycle(c, s, benchKey()) },
			func(int) error { return f.Lifecycle(c, "acme", benchKey(), benchResponse.Status, benchResponse.Body) })
		report(b, ours, raw)
	})
	b.Run("parallel", func(b *testing.B) {
		ours := parallel(b, func() error { return ledgerLifecycle(c, s, benchKey()) })
		raw := parallel(b, func() error {
			return f.Lifecycle(c, "acme", benchKey(), benchResponse.Status, benchResponse.Body)
		})
		report(b, ours, raw)
	})
}

// BenchReplay measures the replay lookup, get by (tenant, key) of a
// completed operation, against the floor's single SELECT.
func BenchReplay(b *testing.B, s ledger.Store, f Floor) {
	c := context.Background()
	const keys = 256
	var ledgerKeys, rawKeys []string
	for range keys {
		k := benchKey()
		if err := ledgerLifecycle(c, s, k); err != nil {
			b.Fatal(err)
		}
		ledgerKeys = append(ledgerKeys, k)
		k = benchKey()
		if err := f.Lifecycle(c, "acme", k, benchResponse.Status, benchResponse.Body); err != nil {
			b.Fatal(err)
		}
		rawKeys = append(rawKeys, k)
	}
	lookup := func(i int) error {
		op, err := s.GetByKey(c, clientKey("acme", ledgerKeys[i%keys]))
		if err == nil && (op.Response == nil || len(op.Response.Body) != len(benchResponse.Body)) {
			err = fmt.Errorf("replay of %s lost its response", op.ID)
		}
		return err
	}
	b.Run("serial", func(b *testing.B) {
		ours, raw := alternate(b, lookup, func(i int) error { return f.Lookup(c, "acme", rawKeys[i%keys]) })
		report(b, ours, raw)
	})
	b.Run("parallel", func(b *testing.B) {
		var n atomic.Int64
		ours := parallel(b, func() error { return lookup(int(n.Add(1))) })
		raw := parallel(b, func() error { return f.Lookup(c, "acme", rawKeys[int(n.Add(1))%keys]) })
		report(b, ours, raw)
	})
}

// alternate runs ours and raw b.N times each, call by call, swapping which
// goes first on every iteration: the first call after a pause pays for
// waking the runtime up, and neither side should always pay it.
func alternate(b *testing.B, ours, raw func(i int) error) (time.Duration, time.Duration) {
	var spent [2]time.Duration
	fns := [2]func(int) error{ours, raw}
	for i := range b.N {
		for j := range 2 {
			k := (i + j) % 2
			t0 := time.Now()
			if err := fns[k](i); err != nil {
				b.Fatal(err)
			}
			spent[k] += time.Since(t0)
		}
	}
	return spent[0], spent[1]
}

// parallel runs fn b.N times from BenchWorkers goroutines and returns the
// wall time, so that time per operation is throughput's inverse.
func parallel(b *testing.B, fn func() error) time.Duration {
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	start := time.Now()
	for range BenchWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := fn(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

func report(b *testing.B, ours, raw time.Duration) {
	n := float64(b.N)
	b.ReportMetric(float64(ours.Nanoseconds())/n, "ns/op") // the store's, not the pair's
	b.ReportMetric(float64(ours.Microseconds())/n, "ledger-µs/op")
	b.ReportMetric(float64(raw.Microseconds())/n, "raw-µs/op")
	b.ReportMetric(float64(ours)/float64(raw), "ledger/raw")
}
