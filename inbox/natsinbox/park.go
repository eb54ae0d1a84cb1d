package natsinbox

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgate/idemgate/inbox"
)

// Headers a park sets on the dead letter's copy, so that it says which
// message it was: the copy's own Nats-Msg-Id is the park's.
const (
	OriginalMsgIDHeader    = "Idemgate-Original-Msg-Id"
	OriginalSubjectHeader  = "Idemgate-Original-Subject"
	OriginalStreamHeader   = "Idemgate-Original-Stream"
	OriginalSequenceHeader = "Idemgate-Original-Sequence"
)

// park publishes the message to the dead letter with its reason, waits
// for the stream's acknowledgement, and only then acknowledges the
// message: a park that fails leaves the message to be delivered again.
func (r *runner) park(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, d inbox.Decision) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.js.PublishMsg(pctx, r.deadCopy(msg, md, d)); err != nil {
		_ = msg.NakWithDelay(time.Second)
		return fmt.Errorf("parking on %s: %w", r.src.DeadLetter, err)
	}
	r.src.Observer.Parked(r.c.Name, d.Reason)
	r.src.Logger.Warn("message parked", slog.String("consumer", r.c.Name), slog.String("reason", d.Reason),
		slog.String("dead_letter", r.src.DeadLetter))
	return msg.DoubleAck(pctx)
}

// deadCopy is the dead letter's copy of msg: its body and its headers,
// the reason, and who it was (its Nats-Msg-Id, subject, stream and
// sequence) under idemgate's headers. Its Nats-Msg-Id is the message's
// place in its stream, so that a park repeated after a crash is dropped
// by the dead letter's duplicate window. JetStream's own headers (Nats-…)
// stay behind: they are instructions to the stream the message was
// published to (Nats-Expected-Stream, Nats-Expected-Last-Sequence,
// Nats-Rollup, Nats-TTL, …), which the dead letter's stream would obey,
// refusing the park or purging itself.
func (r *runner) deadCopy(msg jetstream.Msg, md *jetstream.MsgMetadata, d inbox.Decision) *nats.Msg {
	out := nats.NewMsg(r.src.DeadLetter)
	for k, v := range msg.Headers() {
		if !strings.HasPrefix(k, "Nats-") {
			out.Header[k] = append([]string(nil), v...)
		}
	}
	out.Header.Set(inbox.ReasonHeader, d.Reason)
	out.Header.Set(inbox.ConsumerHeader, r.c.Name)
	if d.OpID != "" {
		out.Header.Set(inbox.OperationHeader, d.OpID)
	}
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		out.Header.Set(OriginalMsgIDHeader, id)
	}
	out.Header.Set(OriginalSubjectHeader, msg.Subject())
	out.Header.Set(OriginalStreamHeader, r.src.Stream)
	if md != nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		out.Header.Set(OriginalSequenceHeader, seq)
		out.Header.Set(jetstream.MsgIDHeader, "idemgate-parked:"+r.src.Stream+":"+seq)
	}
	out.Data = msg.Data()
	return out
}
