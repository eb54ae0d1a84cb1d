package natsinbox_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/inbox/natsinbox"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The broker stops for a while (a nats-server of the test's own): the
// consumer says it was interrupted, naming the server, and reports
// itself down; once the server is back, it says so, reports itself up,
// and delivers what is published.
func TestBrokerOutageIsHeard(t *testing.T) {
	srv := testenv.PrivateNATS(t)
	s := newStream(t, srv.URL)
	s.captureDeadLetter()
	l, h := s.run(natsinbox.Source{})
	testenv.WaitFor(t, "the consumer up", h.Up)
	srv.Stop()
	testenv.WaitFor(t, "the interruption logged", func() bool {
		return l.Line(`"consumer interrupted; trying again"`, `"server":"`+srv.URL+`"`) != ""
	})
	testenv.WaitFor(t, "the consumer reported down", func() bool { return !h.Up() })
	ups := h.Ups()
	srv.Start()
	testenv.WaitFor(t, "the consumer reported up again", func() bool { return h.Up() && h.Ups() > ups })
	if l.Line(`"consumer reconnected"`, srv.URL) == "" {
		t.Fatalf("no reconnection logged:\n%s", l)
	}
	s.publish(`{"amount":1}`, "Event-Id", "evt-after")
	if k := s.delivered(); k != "evt-after" {
		t.Fatalf("delivered %q", k)
	}
}

// A broker that cannot be reached at start-up is named in the consumer's
// log line, without its password.
func TestUnreachableBrokerIsNamed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &stream{t: t, url: fmt.Sprintf("nats://idemgate:broker-secret@%s", addr), name: "S", dead: "dead"}
	l, _ := s.run(natsinbox.Source{})
	testenv.WaitFor(t, "the interruption logged", func() bool { return l.Line("consumer interrupted", "not connected to nats://") != "" })
	if line := l.Line("consumer interrupted"); !strings.Contains(line, addr) || strings.Contains(line, "broker-secret") {
		t.Fatalf("want the server named, without its password: %s", line)
	}
}

// A consumer that stops closes its connection: that is no interruption,
// and its log does not say so; it reports itself down.
func TestStopIsNoInterruption(t *testing.T) {
	s := newStream(t, testenv.RequireNATS(t))
	s.captureDeadLetter()
	l, h := s.run(natsinbox.Source{})
	testenv.WaitFor(t, "the consumer up", h.Up)
	s.stop()
	if line := l.Line("consumer interrupted"); line != "" || h.Up() {
		t.Fatalf("a stop logged as an interruption (%s), or left up (%v)", line, h.Up())
	}
}
