package limits

import (
	"fmt"
	"testing"
	"time"
)

func newTestFailures() (*Failures, *fakeClock) {
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	f := NewFailures(time.Second, 3)
	f.now = clock.now
	return f, clock
}

// fail makes n failed attempts from client.
func fail(f *Failures, client string, n int) {
	for range n {
		f.Fail(client)
	}
}

// TestFailuresPerClient: a client's failed attempts use its own budget
// only: an IPv4 address, or an IPv6 /64 (one host's, or one site's,
// however many addresses it takes from it).
func TestFailuresPerClient(t *testing.T) {
	f, clock := newTestFailures()
	fail(f, "192.0.2.7:4001", 3)
	if wait, ok := f.Fail("192.0.2.7:4002"); ok || wait != time.Second {
		t.Fatalf("a client past its failures: within %v, wait %v", ok, wait)
	}
	for _, other := range []string{"192.0.2.8:4001", "[2001:db8::7]:1", "unix-socket", ""} {
		if _, ok := f.Fail(other); !ok {
			t.Fatalf("%s is past its budget for another's failures", other)
		}
	}
	if _, ok := f.Fail("[::ffff:192.0.2.7]:80"); ok {
		t.Fatal("the same IPv4 address, written as IPv6, escapes its failures")
	}
	fail(f, "[2001:db8:0:5::1]:1", 2)
	fail(f, "[2001:db8:0:5:ffff::9]:1", 1)
	if _, ok := f.Fail("[2001:db8:0:5::abcd]:1"); ok {
		t.Fatal("addresses of one /64 escape their failures by changing address")
	}
	if _, ok := f.Fail("[2001:db8:0:6::1]:1"); !ok {
		t.Fatal("the next /64 is past its budget for its neighbour's failures")
	}
	clock.t = clock.t.Add(time.Second)
	if _, ok := f.Fail("192.0.2.7:4002"); !ok {
		t.Fatal("a client's budget does not come back with time")
	}
}

// TestFailuresTableIsBounded: a guesser with many addresses does not grow
// the table without bound.
func TestFailuresTableIsBounded(t *testing.T) {
	f, _ := newTestFailures()
	f.max = 100
	fail(f, "192.0.2.7:1", 3)
	for i := range 1000 {
		fail(f, fmt.Sprintf("[2001:db8:%x::1]:1", i), 1)
	}
	if n := f.size(); n > 100 {
		t.Fatalf("%d clients kept, at most 100", n)
	}
}
