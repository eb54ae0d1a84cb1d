package inbox

import (
	"fmt"
	"strings"
	"time"
)

// Start says where a consumer that a broker keeps (a JetStream durable)
// starts when it is missing: created for the first time, lost, renamed. A
// message older than the consumer's key retention has no key left to
// recognise it by, and would run again: by default (Since, set to that
// retention) such messages are not delivered.
type Start struct {
	// All delivers every message the stream holds: those older than the
	// key retention run again.
	All bool
	// New delivers only the messages published from now on.
	New bool
	// Since delivers the messages published within Since before now
	// (the zero Start: keyed.DefaultRetention, a route's default).
	Since time.Duration
}

// String is the setting as written: "all", "new", "since 24h0m0s".
func (s Start) String() string {
	switch {
	case s.All:
		return "all"
	case s.New:
		return "new"
	}
	return "since " + s.Since.String()
}

// ParseStart reads a consumer's start setting: "all", "new" or "since
// DURATION"; "" is since retention.
func ParseStart(s string, retention time.Duration) (Start, error) {
	switch verb, arg, _ := strings.Cut(strings.TrimSpace(s), " "); verb {
	case "":
		return Start{Since: retention}, nil
	case "all":
		return Start{All: true}, nil
	case "new":
		return Start{New: true}, nil
	case "since":
		d, err := time.ParseDuration(strings.TrimSpace(arg))
		if err != nil || d <= 0 {
			return Start{}, fmt.Errorf("start %q: want since DURATION (72h, say)", s)
		}
		return Start{Since: d}, nil
	}
	return Start{}, fmt.Errorf("start %q: want all, new or since DURATION", s)
}
