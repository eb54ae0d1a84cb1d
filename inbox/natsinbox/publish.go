package natsinbox

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgate/idemgate/ledger"
)

// TargetPrefix names an outbox target that is a JetStream subject:
// nats:SUBJECT.
const TargetPrefix = "nats:"

// Publisher delivers an outbox's effects to a JetStream subject (an
// outbox.Sender): the effect's body and headers, with Nats-Msg-Id set to
// its derived key, so that the stream's duplicate window drops a publish
// the relay repeats after a crash. A delivery succeeds once the stream
// acknowledges it (the PubAck).
type Publisher struct {
	JS      jetstream.JetStream
	Subject string
}

// Send publishes e and waits for the stream's acknowledgement. No
// connection, or no stream for the subject: nothing was stored, the
// effect is due again. Sent and no acknowledgement: unknown, and the
// relay's next delivery carries the same Nats-Msg-Id.
func (p Publisher) Send(ctx context.Context, e *ledger.Effect, key string) ledger.EffectOutcome {
	m := nats.NewMsg(p.Subject)
	for k, v := range e.Header {
		m.Header[k] = append([]string(nil), v...)
	}
	m.Header.Set(jetstream.MsgIDHeader, key)
	m.Data = e.Body
	ack, err := p.JS.PublishMsg(ctx, m)
	switch {
	case err == nil:
		// The stream's place of the message (the first publish's, for a
		// duplicate the window dropped) is the effect's reference.
		return ledger.EffectOutcome{State: ledger.Succeeded, ResultRef: ack.Stream + ":" + strconv.FormatUint(ack.Sequence, 10)}
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting):
		return ledger.EffectOutcome{State: ledger.Prepared, ErrorCode: "target_unreachable"}
	}
	return ledger.EffectOutcome{State: ledger.Unknown, ErrorCode: "target_no_puback"}
}
