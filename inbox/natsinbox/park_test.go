package natsinbox_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/inbox/natsinbox"
	"github.com/idemgate/idemgate/internal/testenv"
)

// A parked message keeps who it was: its Nats-Msg-Id, its subject, its
// stream and its place there ride on headers of idemgate's own, beside
// its other headers, while the dead letter's Nats-Msg-Id is the park's
// (idemgate-parked:STREAM:SEQ), which the dead letter's duplicate window
// uses to drop a park repeated after a crash.
func TestParkKeepsTheMessagesIdentity(t *testing.T) {
	s := newStream(t, testenv.RequireNATS(t))
	s.captureDeadLetter()
	s.run(natsinbox.Source{})
	s.publish(`{"amount":100}`, jetstream.MsgIDHeader, "m-1", "Event-Id", "evt-1")
	if k := s.delivered(); k != "evt-1" {
		t.Fatalf("delivered %q", k)
	}
	s.conflict("evt-1")
	s.publish(`{"amount":999}`, jetstream.MsgIDHeader, "m-2", "Event-Id", "evt-1")
	s.publish(`{"amount":5}`, jetstream.MsgIDHeader, "m-3")
	testenv.WaitFor(t, "two messages parked", func() bool { return len(s.parked()) == 2 })
	want := map[string]struct{ msgID, seq string }{inbox.ReasonConflict: {"m-2", "2"}, inbox.ReasonNoIdentity: {"m-3", "3"}}
	for _, m := range s.parked() {
		reason := m.Header.Get(inbox.ReasonHeader)
		w, ok := want[reason]
		if !ok {
			t.Fatalf("parked for %q: %v", reason, m.Header)
		}
		for name, v := range map[string]string{
			"Idemgate-Original-Msg-Id":   w.msgID,
			"Idemgate-Original-Subject":  s.subject,
			"Idemgate-Original-Stream":   s.name,
			"Idemgate-Original-Sequence": w.seq,
			jetstream.MsgIDHeader:        "idemgate-parked:" + s.name + ":" + w.seq,
			inbox.ConsumerHeader:         "billing",
		} {
			if got := m.Header.Get(name); got != v {
				t.Errorf("%s park: %s is %q, want %q (%v)", reason, name, got, v, m.Header)
			}
		}
		if reason == inbox.ReasonConflict && (m.Header.Get("Event-Id") != "evt-1" || m.Header.Get(inbox.OperationHeader) != "op-evt-1") {
			t.Errorf("the conflict's park lost its own headers or its operation: %v", m.Header)
		}
	}
	// The same park again (a crash between the PubAck and the ack) is dropped.
	again := nats.NewMsg(s.dead)
	again.Header.Set(jetstream.MsgIDHeader, "idemgate-parked:"+s.name+":3")
	if ack, err := s.js.PublishMsg(context.Background(), again); err != nil || !ack.Duplicate {
		t.Fatalf("a repeated park: %+v %v, want a duplicate dropped", ack, err)
	}
}

// A message published with JetStream's instructions to its own stream
// (Nats-Expected-Stream, an optimistic Nats-Expected-Last-Sequence, …)
// keeps them among its headers; a park must not carry them to the dead
// letter, whose stream would refuse the park (another stream, another
// sequence), or obey them (Nats-Rollup would purge it).
func TestParkLeavesJetStreamsInstructionsBehind(t *testing.T) {
	s := newStream(t, testenv.RequireNATS(t))
	s.captureDeadLetter()
	s.run(natsinbox.Source{})
	s.publish(`{"amount":5}`, "Nats-Expected-Stream", s.name, "Nats-Expected-Last-Sequence", "0", "Trace", "t-1")
	testenv.WaitFor(t, "the message parked", func() bool { return len(s.parked()) == 1 })
	h := s.parked()[0].Header
	if h.Get("Nats-Expected-Stream") != "" || h.Get("Nats-Expected-Last-Sequence") != "" || h.Get("Trace") != "t-1" {
		t.Fatalf("parked with %v: want its own headers, without JetStream's instructions", h)
	}
}
