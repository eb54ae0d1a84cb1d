package server_test

import (
	"sync/atomic"
	"time"
)

// testClock is a gateway's clock (config.Config.Clock) that the test
// moves, instead of sleeping past a second, a min_refresh or a max_age.
// It starts at the wall clock's now, so that tokens signed with real
// times are judged as they would be.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

// Now implements the clock.
func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock on by d.
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
