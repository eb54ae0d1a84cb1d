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

	"github.com/idemgate/idemgate/contract"
)

// result is one row: the rounds of one target, mode and concurrency.
type result struct {
	rate     float64 // requests over the time they took, all rounds
	p50, p99 time.Duration
	rounds   []round
}

// round is one round's share of a row.
type round struct {
	lat     []time.Duration // sorted
	elapsed time.Duration
}

func (r round) rate() float64 { return float64(len(r.lat)) / r.elapsed.Seconds() }

// add appends a round and recomputes the row's figures over all of them.
func (r *result) add(rd round) {
	r.rounds = append(r.rounds, rd)
	var all []time.Duration
	var elapsed time.Duration
	for _, x := range r.rounds {
		all = append(all, x.lat...)
		elapsed += x.elapsed
	}
	slices.Sort(all)
	r.rate, r.p50, r.p99 = float64(len(all))/elapsed.Seconds(), quantile(all, 0.5), quantile(all, 0.99)
}

// quantile of sorted latencies.
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(float64(len(sorted)-1)*q)]
}

var keySeq atomic.Int64

// measureOnce sends n requests from c workers. Replays first create the
// keys they will cycle through, outside the measurement. In mode action a
// request is one whole action effect, reserve and complete (actions.go).
func measureOnce(t target, mode string, n, c int) (round, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: c * 2, MaxIdleConnsPerHost: c * 2}}
	do := func(client *http.Client, base, key string) error { return sendAs(client, base, key, t.bearer()) }
	if mode == action {
		do = sendAction
	}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-%d", keySeq.Add(1))
		if mode == "replay" {
			if err := do(client, t.url, keys[i]); err != nil {
				return round{}, err
			}
		}
	}
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for w := range c {
		wg.Add(1)
		base := t.url
		if len(t.urls) > 0 { // several gateways: each worker keeps to one
			base = t.urls[w%len(t.urls)]
		}
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				key := keys[i%len(keys)]
				if mode != "replay" {
					key = fmt.Sprintf("bench-%d", keySeq.Add(1))
				}
				t0 := time.Now()
				if err := do(client, base, key); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return round{}, err
	}
	if t.flush != nil {
		t.flush()
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	return round{lat: lat, elapsed: elapsed}, nil
}

// sendAs is a write under key, as the holder of bearer.
func sendAs(client *http.Client, base, key, bearer string) error {
	req, _ := http.NewRequest("POST", base+"/v1/tickets", strings.NewReader(ticketBody))
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set(contract.HeaderKey, key)
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
