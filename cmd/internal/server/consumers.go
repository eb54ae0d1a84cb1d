package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/inbox/amqpinbox"
	"github.com/idemgate/idemgate/inbox/natsinbox"
)

// RunConsumers runs the configured consumers (docs/design.md, "Inbox")
// until ctx ends, each message delivered through the gateway's keyed
// path; it returns once every message in hand is finished. A broker that
// cannot be reached is retried, logged, never fatal: the gateway serves
// its routes meanwhile.
func (s *Server) RunConsumers(ctx context.Context) {
	var wg sync.WaitGroup
	// A consumer's broker settings are bound at start (a reload refuses
	// to change them); each message goes through the configuration
	// running when it arrives, so a reload's upstreams and limits apply.
	for _, k := range s.cur.Load().cfg.Consumers {
		c := &inbox.Consumer{Name: k.Name, KeyFrom: k.KeyOf(), Deliver: current{s, k.Name}, MaxDeliveries: k.MaxDeliveries}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.log.Info("consuming", slog.String("consumer", k.Name))
			if err := s.consume(ctx, k, c); err != nil {
				s.log.Error("consumer stopped", slog.String("consumer", k.Name), slog.String("error", err.Error()))
			}
		}()
	}
	wg.Wait()
}

// consume runs one consumer on its broker: its parks and its connection
// are the metrics' (s.metrics is its inbox.Observer), and each reload has
// it look at its dead letter again.
func (s *Server) consume(ctx context.Context, k *config.Consumer, c *inbox.Consumer) error {
	log := s.log // the adapters name the consumer in each line
	recheck, done := s.rechecks.add()
	defer done()
	if k.Source.NATS != "" {
		return natsinbox.Run(ctx, natsinbox.Source{Observer: s.metrics, Recheck: recheck,
			URL: k.Source.NATS, Stream: k.Source.Stream,
			Consumer: k.Source.Consumer, Subject: k.Source.Subject, DeadLetter: k.DeadLetter.Subject,
			Concurrency: k.Concurrency, Start: k.StartAt(), AckWait: 2 * k.Lease, Logger: log}, c)
	}
	return amqpinbox.Run(ctx, amqpinbox.Source{URL: k.Source.AMQP, Queue: k.Source.Queue,
		Exchange: k.DeadLetter.Exchange, RoutingKey: k.DeadLetter.RoutingKey, Concurrency: k.Concurrency,
		Logger: log, Observer: s.metrics, Recheck: recheck}, c)
}

// consumers are the configuration's consumers, by name: the metrics'
// series start with them.
func consumers(cfg *config.Config) []string {
	out := make([]string, 0, len(cfg.Consumers))
	for _, k := range cfg.Consumers {
		out = append(out, k.Name)
	}
	return out
}

// rechecks are the running consumers' Recheck channels.
type rechecks struct {
	mu  sync.Mutex
	chs map[chan struct{}]bool
}

// add is a channel for one consumer, until done.
func (r *rechecks) add() (recheck <-chan struct{}, done func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.chs == nil {
		r.chs = map[chan struct{}]bool{}
	}
	r.chs[ch] = true
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.chs, ch)
	}
}

// signal asks every running consumer to check again, without waiting: one
// that has a check pending already needs no second.
func (r *rechecks) signal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.chs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Deliverer is consumer name's way through the gateway's keyed path, for
// a consumer loop run elsewhere (a library user's, or a benchmark's): the
// running configuration's, at each message.
func (s *Server) Deliverer(name string) inbox.Deliverer { return current{s, name} }

// current delivers through the snapshot running when a message arrives.
type current struct {
	s    *Server
	name string
}

// Deliver implements inbox.Deliverer.
func (c current) Deliver(ctx context.Context, d inbox.Delivery) (inbox.Outcome, error) {
	dl := c.s.cur.Load().gw.Deliverer(c.name)
	if dl == nil {
		return inbox.Outcome{}, fmt.Errorf("consumer %s: not in the running configuration", c.name)
	}
	return dl.Deliver(ctx, d)
}
