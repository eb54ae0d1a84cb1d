package testenv

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Bound is how long WaitFor waits before it fails its test: long enough
// for a loaded machine, there only to end a test that hangs. Nothing
// waits for it to pass.
const Bound = 30 * time.Second

// WaitFor polls cond until it holds, failing the test after Bound.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(Bound); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Logs is where the code under test logs (a slog handler's writer), read
// by the test while it is written: safe for concurrent use.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String is everything logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Line is the first line logged that holds every one of parts, "" if
// none does yet.
func (l *Logs) Line(parts ...string) string {
	for _, line := range strings.Split(l.String(), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return line
		}
	}
	return ""
}
