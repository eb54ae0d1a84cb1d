package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/inbox"
)

// consumerMetrics are the consumers' own families (docs/design.md,
// "Inbox"): what the brokers heard of parks, and whether each consumer
// is consuming. A consumer's deliveries are counted with the requests,
// under their route consumer:NAME.
type consumerMetrics struct {
	parked, unconfirmed *prometheus.CounterVec
	connected           *prometheus.GaugeVec
}

var _ inbox.Observer = (*Metrics)(nil)

// newConsumerMetrics registers the families, each named consumer's
// series at zero (a consumer is not connected before it says so). A
// configuration without consumers has none of these families: nothing
// could ever count in them (consumers are set at start-up).
func newConsumerMetrics(m *Metrics, consumers []string) *consumerMetrics {
	if len(consumers) == 0 {
		return nil
	}
	c := &consumerMetrics{
		parked: counter("consumer_parked_total", "Messages a consumer parked on its dead letter, once the dead "+
			"letter confirmed them, by reason: conflict, no_identity, max_deliveries, or a problem code.",
			"consumer", "reason"),
		unconfirmed: counter("consumer_parks_unconfirmed_total", "Parks the dead letter did not confirm: the "+
			"message was kept, to be delivered again. A dead letter no stream captures (JetStream) or that routes "+
			"to no queue (AMQP) makes it climb.", "consumer"),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "idemgate", Name: "consumer_connected",
			Help: "1 while a consumer is connected to its broker and consuming; 0 while it is not (the broker down " +
				"or unreachable, or consuming refused: a dead letter nothing captures)."}, []string{"consumer"}),
	}
	for _, name := range slices.Compact(slices.Sorted(slices.Values(consumers))) {
		for _, reason := range inbox.ParkReasons {
			c.parked.WithLabelValues(name, reason)
		}
		c.unconfirmed.WithLabelValues(name)
		c.connected.WithLabelValues(name)
	}
	m.Register(c.parked, c.unconfirmed, c.connected)
	return c
}

// Parked implements inbox.Observer.
func (m *Metrics) Parked(consumer, reason string) {
	if m.queues == nil {
		return
	}
	m.queues.parked.WithLabelValues(consumer, reason).Inc()
}

// ParkUnconfirmed implements inbox.Observer.
func (m *Metrics) ParkUnconfirmed(consumer string) {
	if m.queues == nil {
		return
	}
	m.queues.unconfirmed.WithLabelValues(consumer).Inc()
}

// Connected implements inbox.Observer.
func (m *Metrics) Connected(consumer string, up bool) {
	if m.queues == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.queues.connected.WithLabelValues(consumer).Set(v)
}
