package inbox

// ReadAhead is how many unacknowledged messages a broker may hand a
// consumer of the given concurrency (a JetStream MaxAckPending and pull
// size, an AMQP prefetch): twice its concurrency, so that while
// concurrency messages wait for their commits the next ones are here
// already, and a slot that frees is filled without a round trip to the
// broker. The handling stays bounded by concurrency; a message read ahead
// waits one handling's time at most. At concurrency 1 it is 1: a message
// read ahead could be handled while the one before it waits out a
// retry's delay, and concurrency 1 keeps the order.
func ReadAhead(concurrency int) int {
	if concurrency <= 1 {
		return 1
	}
	return 2 * concurrency
}
