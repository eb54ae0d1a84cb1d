package natsinbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/inbox/natsinbox"
	"github.com/idemgate/idemgate/internal/testenv"
)

// A durable that is missing (lost, renamed, never made) is created to
// start at its Start, never at the stream's first message: a message
// older than the consumer's key retention, whose key the store may no
// longer hold, is never executed again (issue 30, case 5). The clock is
// placed between two messages' stream timestamps, so nothing waits on
// time: the older is skipped, the newer and a later one delivered, in
// order.
func TestMissingDurableStartsWithinRetention(t *testing.T) {
	s := newStream(t, testenv.RequireNATS(t))
	s.captureDeadLetter()
	s.publish(`{"n":1}`, "Event-Id", "evt-old")
	s.publish(`{"n":2}`, "Event-Id", "evt-new")
	old, recent := s.storedAt(1), s.storedAt(2)
	if !recent.After(old) {
		t.Fatalf("the two messages share a timestamp (%v): no instant lies between them", old)
	}
	between := old.Add(recent.Sub(old) / 2)
	s.run(natsinbox.Source{Start: inbox.Start{Since: time.Hour},
		Now: func() time.Time { return between.Add(time.Hour) }})
	if k := s.delivered(); k != "evt-new" {
		t.Fatalf("first delivered %q; want evt-new (evt-old is older than the start)", k)
	}
	s.publish(`{"n":3}`, "Event-Id", "evt-later")
	if k := s.delivered(); k != "evt-later" {
		t.Fatalf("then delivered %q; want evt-later", k)
	}
}

// storedAt is when the stream stored its message seq.
func (s *stream) storedAt(seq uint64) time.Time {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Bound)
	defer cancel()
	st, err := s.js.Stream(ctx, s.name)
	if err != nil {
		s.t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		s.t.Fatal(err)
	}
	return m.Time
}
