package together

import (
	"sync"
	"testing"
	"time"
)

// TestAt: every copy runs, each with its own index, and all of them are
// running at once (each waits for all the others to have started).
func TestAt(t *testing.T) {
	const n = 8
	var started sync.WaitGroup
	started.Add(n)
	seen := make([]bool, n)
	done := make(chan struct{})
	go func() {
		At(n, func(i int) {
			seen[i] = true
			started.Done()
			started.Wait()
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the copies did not all run at once")
	}
	for i, ok := range seen {
		if !ok {
			t.Errorf("copy %d did not run", i)
		}
	}
}
