// Package inbox is the domain of a message consumer (docs/design.md,
// "Inbox: messages and webhooks"): a message taken from a queue is an
// operation of the consumer's tenant, keyed by its identity and
// fingerprinted by its body, and the broker hears of it only once the
// operation is final or unknown. This package decides, for each message,
// what the broker is told: acknowledge it, deliver it again later, or park
// it on the dead letter with a reason. It knows no broker and no HTTP:
// the brokers are at the edge (inbox/natsinbox, inbox/amqpinbox) and the
// operation goes through the data plane behind a Deliverer (the gateway's).
package inbox

import (
	"context"
	"math/rand/v2"
	"net/textproto"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Message is one delivery of a message, as a source hands it over.
type Message struct {
	// Header holds the message's headers (NATS headers, AMQP table values
	// as text), by canonical MIME name.
	Header map[string][]string
	// MessageID is the broker's own message identity where it has one
	// besides the headers (AMQP's message_id property).
	MessageID string
	// ContentType is the body's media type, "" when the message says none
	// (then it is read as JSON).
	ContentType string
	Body        []byte
	// Deliveries counts the deliveries of this message, this one included.
	Deliveries int
}

// Delivery is what a Deliverer runs: the operation of one message.
type Delivery struct {
	Key         string
	Body        []byte
	ContentType string
}

// Outcome is how a delivery through the data plane ended, as the data
// plane's answer says it.
type Outcome struct {
	// OpID is the operation's id, when the answer named one.
	OpID string
	// State is the operation's state after the delivery, "" when it is not
	// known (the answer was a refusal that names no operation).
	State ledger.State
	// Code is the problem code the data plane answered, "" for an
	// upstream's own answer or a replay.
	Code string
	// Replayed says the operation was final before this delivery: the
	// stored answer was replayed, nothing was sent.
	Replayed bool
}

// A Deliverer runs a delivery as a keyed write of the consumer's tenant:
// reservation, forwarding with the key, outcome mapping, replay, audit and
// metrics. An error means the delivery could not be attempted at all.
type Deliverer interface {
	Deliver(ctx context.Context, d Delivery) (Outcome, error)
}

// Verdict is what the broker is told of a message.
type Verdict int

// The verdicts.
const (
	// Ack: the operation is final; the message is done.
	Ack Verdict = iota
	// Retry: the operation is not final yet (executing elsewhere, released,
	// refused for a while); the message is delivered again after Delay.
	Retry
	// Park: the message can never be delivered as it is (a conflict, no
	// identity, too many deliveries), or its outcome is unknown and waits
	// for a person; it goes to the dead letter with Reason, its body and
	// its headers, and is acknowledged only once the dead letter has it.
	Park
)

// The reasons a message is parked, in the dead letter's ReasonHeader.
const (
	ReasonConflict      = "conflict"
	ReasonNoIdentity    = "no_identity"
	ReasonMaxDeliveries = "max_deliveries"
	// ReasonUnknown: the message's operation is unknown (sent, and its
	// answer lost, or the upstream answered a status that means unknown).
	// The dead letter keeps the message, so that an operator who resolves
	// the operation "not applied" can deliver it again.
	ReasonUnknown = "unknown"
)

// Headers idemgate sets on a parked message.
const (
	ReasonHeader   = "Idemgate-Parked-Reason"
	ConsumerHeader = "Idemgate-Consumer"
	// OperationHeader names the operation a parked message met, if any.
	OperationHeader = "Idemgate-Operation"
)

// Decision is a verdict and what goes with it.
type Decision struct {
	Verdict Verdict
	// Delay is how long before a Retry is delivered again.
	Delay time.Duration
	// Reason says why: a park's reason, a retry's code, or the state acked.
	Reason string
	// OpID is the message's operation, when one was reached.
	OpID string
}

// Consumer is one configured consumer's logic.
type Consumer struct {
	Name    string
	KeyFrom KeyFrom
	Deliver Deliverer
	// MaxDeliveries bounds the deliveries of a message that does not end
	// (0: no bound); past it the message is parked.
	MaxDeliveries int
	// Backoff is the delay of a retry after the n-th delivery (default:
	// 200ms doubling to 30s, ±20%).
	Backoff func(deliveries int) time.Duration
}

// Handle decides what becomes of m. A message past MaxDeliveries is parked
// before anything is tried (a poison message may kill its consumer before
// any decision); one that would be retried at its last allowed delivery is
// parked instead.
func (c *Consumer) Handle(ctx context.Context, m Message) Decision {
	if c.MaxDeliveries > 0 && m.Deliveries > c.MaxDeliveries {
		return Decision{Verdict: Park, Reason: ReasonMaxDeliveries}
	}
	key, ok := c.KeyFrom.Of(m)
	if !ok {
		return Decision{Verdict: Park, Reason: ReasonNoIdentity}
	}
	out, err := c.Deliver.Deliver(ctx, Delivery{Key: key, Body: m.Body, ContentType: m.ContentType})
	d := Decision{Verdict: Retry, Reason: "not_delivered", OpID: out.OpID}
	if err == nil {
		d = Decide(out)
	}
	if d.Verdict == Retry {
		if c.MaxDeliveries > 0 && m.Deliveries >= c.MaxDeliveries {
			return Decision{Verdict: Park, Reason: ReasonMaxDeliveries, OpID: d.OpID}
		}
		d.Delay = c.backoff(m.Deliveries)
	}
	return d
}

// Decide maps a delivery's outcome to a verdict: acknowledged once the
// operation is final (a replay is a duplicate recognised); parked when
// the message can never run as it is, or when its operation is unknown;
// retried otherwise (released: not applied, delivered again later).
func Decide(o Outcome) Decision {
	d := Decision{OpID: o.OpID}
	switch {
	case o.Replayed:
		d.Verdict, d.Reason = Ack, "duplicate"
	case o.Code == contract.CodeFingerprintMismatch:
		d.Verdict, d.Reason = Park, ReasonConflict
	case o.Code == contract.CodeMissingKey:
		d.Verdict, d.Reason = Park, ReasonNoIdentity
	case o.Code == contract.CodeInvalidKey, o.Code == contract.CodeInvalidCommand,
		o.Code == contract.CodePayloadTooLarge, o.Code == contract.CodeUnsupportedMediaType:
		d.Verdict, d.Reason = Park, o.Code
	case o.State.Final():
		d.Verdict, d.Reason = Ack, string(o.State)
	case o.State == ledger.Unknown:
		d.Verdict, d.Reason = Park, ReasonUnknown
	case o.Code != "":
		d.Verdict, d.Reason = Retry, o.Code
	default:
		d.Verdict, d.Reason = Retry, "state_"+string(o.State)
	}
	return d
}

func (c *Consumer) backoff(n int) time.Duration {
	if c.Backoff != nil {
		return c.Backoff(n)
	}
	return Backoff(n)
}

// Backoff is the default delay of a retry after the n-th delivery: 200ms
// doubling to 30s, ±20%.
func Backoff(n int) time.Duration {
	d := 200 * time.Millisecond
	for i := 1; i < n && d < 30*time.Second; i++ {
		d *= 2
	}
	d = min(d, 30*time.Second)
	return d - d/5 + rand.N(2*d/5+1)
}

// Get reads a header of m by any case of its name.
func (m Message) Get(name string) string {
	if v := m.Header[textproto.CanonicalMIMEHeaderKey(name)]; len(v) > 0 {
		return v[0]
	}
	for k, v := range m.Header { // a broker may keep names as they were sent
		if len(v) > 0 && textproto.CanonicalMIMEHeaderKey(k) == textproto.CanonicalMIMEHeaderKey(name) {
			return v[0]
		}
	}
	return ""
}
