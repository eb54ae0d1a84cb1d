package server

import (
	"context"
	"log/slog"
	"sync"

	"github.com/idemgate/idemgate/gateway"
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
	for _, k := range s.cfg.Consumers {
		c := &inbox.Consumer{Name: k.Name, KeyFrom: k.KeyOf(), Deliver: s.gw.Deliverer(k.Name), MaxDeliveries: k.MaxDeliveries}
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

func (s *Server) consume(ctx context.Context, k *gateway.ConsumerConfig, c *inbox.Consumer) error {
	log := s.log // the adapters name the consumer in each line
	if k.Source.NATS != "" {
		return natsinbox.Run(ctx, natsinbox.Source{URL: k.Source.NATS, Stream: k.Source.Stream,
			Consumer: k.Source.Consumer, Subject: k.Source.Subject, DeadLetter: k.DeadLetter.Subject,
			Concurrency: k.Concurrency, AckWait: 2 * k.Lease, Logger: log}, c)
	}
	return amqpinbox.Run(ctx, amqpinbox.Source{URL: k.Source.AMQP, Queue: k.Source.Queue,
		Exchange: k.DeadLetter.Exchange, RoutingKey: k.DeadLetter.RoutingKey, Concurrency: k.Concurrency,
		Logger: log}, c)
}

// Deliverer is consumer name's way through the gateway's keyed path, for
// a consumer loop run elsewhere (a library user's, or a benchmark's).
func (s *Server) Deliverer(name string) inbox.Deliverer { return s.gw.Deliverer(name) }
