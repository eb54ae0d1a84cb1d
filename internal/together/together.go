// Package together starts copies of a function at the same moment, as the
// drills need to make concurrent copies of a request really concurrent.
package together

import "sync"

// At runs n copies of fn, released at the same moment, and returns when
// all have ended; fn gets its copy's index.
func At(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}
