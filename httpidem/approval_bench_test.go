package httpidem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// counting is a real store that counts the calls made to it: reads, and
// steps that write.
type counting struct {
	ledger.Store
	reads, writes atomic.Int64
}

func (c *counting) Get(ctx context.Context, id string) (*ledger.Operation, error) {
	c.reads.Add(1)
	return c.Store.Get(ctx, id)
}

func (c *counting) GetByKey(ctx context.Context, k ledger.OpKey) (*ledger.Operation, error) {
	c.reads.Add(1)
	return c.Store.GetByKey(ctx, k)
}

func (c *counting) GetApproval(ctx context.Context, id string) (*ledger.Approval, error) {
	c.reads.Add(1)
	return c.Store.GetApproval(ctx, id)
}

func (c *counting) Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	c.writes.Add(1)
	return c.Store.Reserve(ctx, p)
}

func (c *counting) Acquire(ctx context.Context, p ledger.AcquireParams) (ledger.Reservation, error) {
	c.writes.Add(1)
	return c.Store.Acquire(ctx, p)
}

func (c *counting) ReopenApproval(ctx context.Context, p ledger.ReopenParams) (*ledger.Operation, error) {
	c.writes.Add(1)
	return c.Store.ReopenApproval(ctx, p)
}

// retryHandler is the middleware in front of a counting deployment
// handler, on the approval policy of these tests, without a socket: the
// benchmark measures the middleware and its store.
func retryHandler(tb testing.TB, s ledger.Store, cache int64) http.Handler {
	tb.Helper()
	pol, err := approval.Compile(prodPolicy)
	if err != nil {
		tb.Fatal(err)
	}
	p := approval.Principal{Name: "bot", Tenant: "acme", Roles: []string{"agent"}}
	m, err := httpidem.New(httpidem.Options{Store: s, ReplayCache: cache,
		Principal: func(*http.Request) (approval.Principal, error) { return p, nil },
		Tenant:    func(*http.Request) (string, error) { return "acme", nil },
		Routes:    []httpidem.Route{{Method: "POST", Pattern: "/v1/services/{service}/deployments", Approval: pol}}})
	if err != nil {
		tb.Fatal(err)
	}
	return m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"deployment":"D-1"}`))
	}))
}

func serveOnce(h http.Handler, key, body string) int {
	req := httptest.NewRequest("POST", "/v1/services/api/deployments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

// TestPendingRetryIsOneRead: while an approval is pending, each identical
// retry costs the store one read and no write.
func TestPendingRetryIsOneRead(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		c := &counting{Store: s}
		h := retryHandler(t, c, 0)
		if code := serveOnce(h, "dep", prod); code != 202 {
			t.Fatalf("first: %d", code)
		}
		c.reads.Store(0)
		c.writes.Store(0)
		for range 10 {
			if code := serveOnce(h, "dep", prod); code != 202 {
				t.Fatalf("retry: %d", code)
			}
		}
		if r, w := c.reads.Load(), c.writes.Load(); r != 10 || w != 0 {
			t.Fatalf("10 pending retries: %d reads, %d writes; want 10 and 0", r, w)
		}
	})
}

// BenchmarkRetries compares, on each store, an identical retry while its
// approval is pending with a replay of a finished operation: from the
// replay cache (the default) and from the store.
func BenchmarkRetries(b *testing.B) {
	dbtest.Each(b, func(b *testing.B, db dbtest.DB) {
		s := db.Open(b, roomy)
		b.Run("pending", func(b *testing.B) { benchRetry(b, s, 0, prod) })
		staging := `{"artifact":"api@sha256:aaaa","environment":"staging"}`
		b.Run("replay-cached", func(b *testing.B) { benchRetry(b, s, 0, staging) })
		b.Run("replay-store", func(b *testing.B) { benchRetry(b, s, -1, staging) })
	})
}

func benchRetry(b *testing.B, s ledger.Store, cache int64, body string) {
	h := retryHandler(b, s, cache)
	key := "bench-" + time.Now().Format("150405.000000000")
	if code := serveOnce(h, key, body); code != 202 && code != 201 {
		b.Fatalf("first: %d", code)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if code := serveOnce(h, key, body); code != 202 && code != 201 {
				b.Errorf("retry: %d", code)
				return
			}
		}
	})
}
