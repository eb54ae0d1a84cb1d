package natsinbox_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/inbox/natsinbox"
	"github.com/idemgate/idemgate/internal/testenv"
)

// A dead letter that no stream captures could confirm no park: the
// consumer refuses to consume, says why, and reports itself not
// connected, until a stream captures it; then it parks what it must and
// delivers the rest.
func TestUncapturedDeadLetterIsRefused(t *testing.T) {
	s := newStream(t, testenv.RequireNATS(t))
	l, h := s.run(natsinbox.Source{})
	s.publish(`{"amount":5}`)
	s.publish(`{"amount":7}`, "Event-Id", "evt-1")
	testenv.WaitFor(t, "the refusal logged", func() bool { return l.Line("consumer interrupted", s.dead, "captured by no stream") != "" })
	if h.Up() || len(s.deliveries) != 0 {
		t.Fatalf("consuming without a dead letter (up %v, %d delivered)", h.Up(), len(s.deliveries))
	}
	s.captureDeadLetter()
	if k := s.delivered(); k != "evt-1" {
		t.Fatalf("delivered %q", k)
	}
	testenv.WaitFor(t, "the message without identity parked", func() bool { return len(s.parked()) == 1 })
	testenv.WaitFor(t, "the consumer up", h.Up)
}

// The dead letter's stream is deleted while the consumer runs: the next
// park cannot be confirmed. The message is kept, the park counted as
// unconfirmed and logged, and the consumer stops consuming, saying why
// (JetStream keeps an unacknowledged message's slot, whatever delay its
// NAK asks: consuming on would stall on such messages, silently). Once a
// stream captures the dead letter again, the message is parked and the
// one behind it delivered.
func TestUnconfirmedParkIsLoud(t *testing.T) {
	s := newStream(t, testenv.RequireNATS(t))
	s.captureDeadLetter()
	l, h := s.run(natsinbox.Source{Concurrency: 1})
	s.publish(`{"amount":1}`, "Event-Id", "evt-1")
	if k := s.delivered(); k != "evt-1" {
		t.Fatalf("delivered %q", k)
	}
	s.dropDeadLetter()
	s.publish(`{"amount":5}`)
	s.publish(`{"amount":7}`, "Event-Id", "evt-2")
	testenv.WaitFor(t, "the park counted unconfirmed", func() bool { return h.Unconfirmed() > 0 })
	testenv.WaitFor(t, "the park's failure logged", func() bool { return l.Line(`"level":"ERROR"`, "park not confirmed", s.dead) != "" })
	testenv.WaitFor(t, "the refusal logged", func() bool { return l.Line("consumer interrupted", s.dead, "captured by no stream") != "" })
	testenv.WaitFor(t, "the consumer reported down", func() bool { return !h.Up() })
	s.captureDeadLetter()
	if k := s.delivered(); k != "evt-2" {
		t.Fatalf("delivered %q", k)
	}
	testenv.WaitFor(t, "the message parked", func() bool { return len(s.parked()) == 1 })
	if got := h.Reasons(); !slices.Equal(got, []string{inbox.ReasonNoIdentity}) {
		t.Fatalf("parks heard %v", got)
	}
}

// A dead letter that the consumed stream itself captures, under the
// consumer's filter, would hand each park back to the consumer as a new
// message (a park of a message without identity, parked again, for
// ever): refused as one no stream captures.
func TestDeadLetterInTheConsumedStreamIsRefused(t *testing.T) {
	s := newStream(t, testenv.RequireNATS(t))
	if err := s.js.DeleteStream(context.Background(), s.name); err != nil { // its subjects are the new one's
		t.Fatal(err)
	}
	s.name, s.dead = s.name+"_ALL", strings.TrimSuffix(s.subject, ".in")+".dead"
	s.create(s.name, strings.TrimSuffix(s.subject, ".in")+".>")
	l, h := s.run(natsinbox.Source{})
	s.publish(`{"amount":5}`)
	testenv.WaitFor(t, "the refusal logged", func() bool {
		return l.Line("consumer interrupted", s.dead, "captured by stream "+s.name+", which this consumer reads") != ""
	})
	if h.Up() || len(h.Reasons()) != 0 {
		t.Fatalf("consuming its own dead letter (up %v, parked %v)", h.Up(), h.Reasons())
	}
}
