package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	rate     float64
	p50, p99 time.Duration
}

var keySeq atomic.Int64

// measure warms the target up (connections, prepared statements, caches)
// with a fifth as many requests, then sends n requests from c workers.
func measure(t target, mode string, n, c int) (result, error) {
	if _, err := measureOnce(t, mode, max(n/5, c), c); err != nil {
		return result{}, err
	}
	return measureOnce(t, mode, n, c)
}

// measureOnce sends n requests from c workers. Replays first create the
// keys they will cycle through, outside the measurement.
func measureOnce(t target, mode string, n, c int) (result, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: c * 2, MaxIdleConnsPerHost: c * 2}}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-%d", keySeq.Add(1))
		if mode == "replay" {
			if err := send(client, t.url, keys[i]); err != nil {
				return result{}, err
			}
		}
	}
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				key := keys[i%len(keys)]
				if mode == "new-key" {
					key = fmt.Sprintf("bench-%d", keySeq.Add(1))
				}
				t0 := time.Now()
				if err := send(client, t.url, key); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return result{}, err
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	return result{rate: float64(n) / elapsed.Seconds(), p50: lat[n/2], p99: lat[n*99/100]}, nil
}

func send(client *http.Client, base, key string) error {
	req, _ := http.NewRequest("POST", base+"/v1/tickets", strings.NewReader(`{"title":"bench","priority":2}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
