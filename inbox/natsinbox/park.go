package natsinbox

import (
	"context"
	"errors"
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
// message: a park that fails leaves the message to be delivered again
// (unconfirmed).
func (r *runner) park(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, d inbox.Decision) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.js.PublishMsg(pctx, r.deadCopy(msg, md, d)); err != nil {
		r.unconfirmed(msg, md, d, err)
		return nil
	}
	r.src.Observer.Parked(r.c.Name, d.Reason)
	r.src.Logger.Warn("message parked", slog.String("consumer", r.c.Name), slog.String("reason", d.Reason),
		slog.String("dead_letter", r.src.DeadLetter))
	return msg.DoubleAck(pctx)
}

// unconfirmed keeps a message whose park the dead letter did not confirm:
// counted, logged at error, and delivered again after a delay that grows
// with its deliveries. The delay spares the broker and the log a park
// failing in a loop; it frees nothing: JetStream keeps an unacknowledged
// message's slot (MaxAckPending) through its NAK's delay, so such
// messages, as many as the concurrency, would stop the consumer silently.
// A park that no stream captures is the one that cannot heal by itself:
// it ends the session, and the next one refuses to consume, saying why
// (deadLetterCaptured), until a stream captures the dead letter.
func (r *runner) unconfirmed(msg jetstream.Msg, md *jetstream.MsgMetadata, d inbox.Decision, err error) {
	r.src.Observer.ParkUnconfirmed(r.c.Name)
	n := 1
	if md != nil {
		n = int(md.NumDelivered)
	}
	delay := inbox.Backoff(n)
	if r.c.Backoff != nil {
		delay = r.c.Backoff(n)
	}
	uncaptured := errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
	if uncaptured {
		// The session ends: its pull request stays on the server until it
		// expires, and would take a redelivery due before then.
		delay = max(delay, pullExpiry+time.Second)
	}
	r.src.Logger.Error("park not confirmed; message kept", slog.String("consumer", r.c.Name),
		slog.String("reason", d.Reason), slog.String("dead_letter", r.src.DeadLetter),
		slog.String("error", err.Error()), slog.Duration("again_in", delay))
	_ = msg.NakWithDelay(delay)
	if uncaptured {
		r.endSession(r.uncaptured())
	}
}

// deadLetterCaptured checks, with JetStream's stream lookup by subject,
// that a stream captures the dead letter and that it is not the stream
// this consumer reads through a filter the dead letter matches (each park
// would come back as a message to deliver, under another identity).
func (r *runner) deadLetterCaptured(ctx context.Context) error {
	name, err := r.js.StreamNameBySubject(ctx, r.src.DeadLetter)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return r.uncaptured()
	case err != nil:
		return fmt.Errorf("looking up the stream of dead letter %s: %w", r.src.DeadLetter, err)
	case name == r.src.Stream && matches(r.src.Subject, r.src.DeadLetter):
		return &unusableError{fmt.Sprintf("dead letter %s is captured by stream %s, which this consumer reads "+
			"(subject %q): each park would be consumed again; give the dead letter a subject of its own stream",
			r.src.DeadLetter, name, r.src.Subject)}
	}
	return nil
}

// uncaptured is the error of a dead letter no stream captures.
func (r *runner) uncaptured() error {
	return &unusableError{fmt.Sprintf("dead letter %s is captured by no stream: no park could be confirmed, "+
		"so nothing is consumed until a stream captures it", r.src.DeadLetter)}
}

// unusableError says a dead letter cannot take parks until an operator
// acts, as opposed to a broker that cannot be asked for now.
type unusableError struct{ msg string }

func (e *unusableError) Error() string { return e.msg }

// matches reports whether a subject is among a filter's ("" is every
// subject; * is one token, > the rest).
func matches(filter, subject string) bool {
	if filter == "" {
		return true
	}
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s) || tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(f) == len(s)
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
