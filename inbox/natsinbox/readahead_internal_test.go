package natsinbox

import "testing"

// TestReadAhead: a consumer is handed twice its concurrency, so that a
// freed slot is filled without a round trip to the server, except at
// concurrency 1, whose order a message read ahead could break (handled
// while the one before it waits out a NAK's delay).
func TestReadAhead(t *testing.T) {
	for c, want := range map[int]int{1: 1, 2: 4, 16: 32} {
		if got := (Source{Concurrency: c}).readAhead(); got != want {
			t.Errorf("concurrency %d: %d in flight, want %d", c, got, want)
		}
	}
}
