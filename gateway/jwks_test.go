package gateway

import (
	"context"
	"github.com/idemgate/idemgate/config"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/idp"
)

// TestJWKSFetchesOnceForConcurrentCallers: tokens that need the JWKS
// fetched while a fetch is under way wait for that one fetch, and none
// starts another after it, though it failed and took longer than
// min_refresh: with a slow issuer, no request waits for more than one
// fetch (they queued, one fetch after another, each up to its timeout).
func TestJWKSFetchesOnceForConcurrentCallers(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	arrived, release := make(chan struct{}, 64), make(chan struct{})
	var fetches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		arrived <- struct{}{}
		<-release
		now.Add(int64(2 * time.Second)) // the fetch took longer than min_refresh
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	k := newJWKS((&config.JWT{JWKSURL: srv.URL, MinRefresh: time.Second, MaxAge: time.Hour,
		Algorithms: config.Asymmetric}).WithClock(clock), slog.New(slog.DiscardHandler))
	key, err := idp.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := idp.SignWith(key, "k-new", map[string]any{"sub": "a"})
	if err != nil {
		t.Fatal(err)
	}
	const callers = 8
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			if _, err := k.VerifySignature(context.Background(), tok); err == nil {
				t.Error("verified with no keys")
			}
		})
	}
	<-arrived
	for k.refreshing.Load() < callers { // every caller is in, the fetch still under way
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for %d callers that arrived during one", n, callers)
	}
}
