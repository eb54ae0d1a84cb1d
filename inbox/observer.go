package inbox

// Observer hears what a broker adapter does that a Decision does not say:
// which parks the dead letter confirmed, which it did not, and whether
// the consumer is connected to its broker and consuming. The metrics
// implement it; cmd/ wires them in, so that this package (and the
// adapters) link no metrics library. Calls come from the adapters'
// goroutines, concurrently.
type Observer interface {
	// Parked: consumer's message is on the dead letter (the stream's or the
	// broker's confirm came back), for reason.
	Parked(consumer, reason string)
	// ParkUnconfirmed: a park of consumer's message was not confirmed (no
	// stream or queue took it, a refusal, a timeout): the message was kept
	// and will be delivered again.
	ParkUnconfirmed(consumer string)
	// Connected: consumer is connected to its broker and consuming (true),
	// or not (false: the broker is down or unreachable, or the consumer
	// refuses to consume, its dead letter being unusable).
	Connected(consumer string, up bool)
}

// ParkReasons are the reasons of a park that idemgate names itself (a
// problem code, such as invalid_key, is a reason too): the series an
// observer starts at zero.
var ParkReasons = []string{ReasonConflict, ReasonNoIdentity, ReasonMaxDeliveries, ReasonUnknown}

// Unobserved is an Observer that hears nothing: an adapter's default.
type Unobserved struct{}

// Parked implements Observer.
func (Unobserved) Parked(string, string) {}

// ParkUnconfirmed implements Observer.
func (Unobserved) ParkUnconfirmed(string) {}

// Connected implements Observer.
func (Unobserved) Connected(string, bool) {}
