package sqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/ledger/storetest"
	"github.com/idemgate/idemgate/store/sqlite"
)

// Below the floor, an Enqueue (or a new reservation) fails its writer
// batch as a whole: the completions that share its commit fail with it.
func TestFloorRefusalSparesItsBatch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path, sqlite.Options{})
	var leases []ledger.Lease
	for range 200 {
		r := storetest.Reserved(t, s)
		leases = append(leases, *r.Lease)
	}
	s.Close()
	low := open(t, path, sqlite.Options{MinFree: 1 << 60})
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	stop := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = low.Enqueue(ctx, []ledger.EffectParams{{Tenant: "acme", OperationKey: "k", Name: "e" + string(rune('a'+i)),
					Target: "crm", Path: "/x"}})
			}
		}()
	}
	for _, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := low.Complete(ctx, l, ledger.Outcome{State: ledger.Succeeded,
				Response: &ledger.Response{Status: 200}}); err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d of %d completions failed below the floor while enqueues were refused beside them", failed, len(leases))
	if failed > 0 {
		t.Errorf("BUG: completions failed only because a refused enqueue shared their batch")
	}
}
