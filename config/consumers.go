package config

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/keyed"
)

// Consumer is one consumer of a queue (docs/design.md, "Inbox:
// messages and webhooks"): each message an operation of Tenant, keyed by
// KeyFrom, delivered through the data plane to an upstream.
type Consumer struct {
	Name   string `yaml:"name"`
	Tenant string `yaml:"tenant"`
	Source Source `yaml:"source"`
	// KeyFrom is header:NAME, message_id (AMQP) or body:/pointer; by
	// default header:Nats-Msg-Id for NATS and message_id for AMQP.
	KeyFrom string  `yaml:"key_from"`
	Deliver Deliver `yaml:"deliver"`
	// Outcomes are the upstream's statuses known to mean not applied or
	// final, as a route's.
	Outcomes Outcomes `yaml:"outcomes"`
	// Lease and Retention are a route's (30s, 24h).
	Lease     time.Duration `yaml:"lease"`
	Retention time.Duration `yaml:"retention"`
	// MaxDeliveries bounds the deliveries of a message that does not end
	// (5); past it, the message is parked on DeadLetter.
	MaxDeliveries int        `yaml:"max_deliveries"`
	DeadLetter    DeadLetter `yaml:"dead_letter"`
	// Start is where a JetStream durable that is missing is created to
	// start: "all", "new", or "since DURATION" (default: since the
	// retention, so that no message older than its key runs again).
	Start string `yaml:"start"`
	// Concurrency is how many messages are handled at once (1, which keeps
	// the order of the messages): AMQP's prefetch; JetStream's
	// MaxAckPending is twice it (above 1), the rest read ahead.
	Concurrency int `yaml:"concurrency"`

	line    int
	keyFrom inbox.KeyFrom
	start   inbox.Start
}

// StartAt is where a missing JetStream durable starts (Start, parsed).
func (c *Consumer) StartAt() inbox.Start { return c.start }

// Source is where a consumer's messages come from: a JetStream
// stream (NATS, Stream, Consumer, Subject) or a RabbitMQ queue (AMQP, Queue).
type Source struct {
	NATS     string `yaml:"nats"`
	Stream   string `yaml:"stream"`
	Consumer string `yaml:"consumer"`
	Subject  string `yaml:"subject"`
	AMQP     string `yaml:"amqp"`
	Queue    string `yaml:"queue"`
}

// Deliver is where a message's operation goes: Method Path on Upstream.
type Deliver struct {
	Upstream string `yaml:"upstream"`
	Method   string `yaml:"method"`
	Path     string `yaml:"path"`
	Action   string `yaml:"action"`
}

// DeadLetter is where parked messages go: a JetStream Subject, or an
// AMQP Exchange ("" is the default exchange) and RoutingKey.
type DeadLetter struct {
	Subject    string `yaml:"subject"`
	Exchange   string `yaml:"exchange"`
	RoutingKey string `yaml:"routing_key"`
}

// KeyOf is where the consumer's messages carry their identity.
func (c *Consumer) KeyOf() inbox.KeyFrom { return c.keyFrom }

// Route is the operations' route, and the metrics' route label.
func (c *Consumer) Route() string { return "consumer:" + c.Name }

// checkConsumers validates every consumer, and fills its defaults.
func (c *Config) checkConsumers() error {
	seen := map[string]bool{}
	for _, k := range c.Consumers {
		if k == nil {
			return fmt.Errorf("%s: a consumer is empty", c.file)
		}
		if seen[k.Name] {
			return c.errorf(k.line, "consumer %q is defined twice", k.Name)
		}
		seen[k.Name] = true
		if err := c.checkConsumer(k); err != nil {
			return c.errorf(k.line, "consumer %q: %v", k.Name, err)
		}
	}
	return nil
}

func (c *Config) checkConsumer(k *Consumer) error {
	switch {
	case !contract.ValidActionName(k.Name):
		return fmt.Errorf("want a name of [a-z0-9._-], starting with a letter or digit, at most 128")
	case k.Tenant == "" || strings.Contains(k.Tenant, ":"):
		return fmt.Errorf("tenant %q: required, without ':'", k.Tenant)
	case k.Lease < 0 || k.Retention < 0 || k.MaxDeliveries < 0 || k.Concurrency < 0 || k.Concurrency > 1024:
		return fmt.Errorf("lease, retention, max_deliveries must be positive, concurrency within 1..1024")
	}
	if err := k.Outcomes.check(); err != nil {
		return err
	}
	if k.Start != "" && k.Source.NATS == "" {
		return fmt.Errorf("start %q: only a JetStream durable has a place to start; a queue delivers what it holds", k.Start)
	}
	retention := k.Retention
	if retention == 0 {
		retention = keyed.DefaultRetention
	}
	var err error
	if k.start, err = inbox.ParseStart(k.Start, retention); err != nil {
		return err
	}
	if err := checkSource(k); err != nil {
		return err
	}
	if err := c.checkDeliver(k); err != nil {
		return err
	}
	if k.keyFrom, err = inbox.ParseKeyFrom(k.KeyFrom); err != nil {
		return err
	}
	if k.KeyFrom == "message_id" && k.Source.AMQP == "" {
		return fmt.Errorf("key_from message_id is AMQP's; a NATS message's id is header:Nats-Msg-Id")
	}
	if k.MaxDeliveries == 0 {
		k.MaxDeliveries = 5
	}
	k.Concurrency = max(k.Concurrency, 1)
	return nil
}

// checkSource checks the broker's settings and fills the default key_from.
func checkSource(k *Consumer) error {
	s, dl := k.Source, k.DeadLetter
	switch {
	case (s.NATS == "") == (s.AMQP == ""):
		return fmt.Errorf("source: one of nats: URL or amqp: URL")
	case s.NATS != "" && (!brokerURL(s.NATS, "nats", "tls") || s.Stream == "" || s.Consumer == ""):
		return fmt.Errorf("source: nats: nats://host:port, with stream and consumer")
	case s.NATS != "" && (dl.Subject == "" || dl.RoutingKey != "" || dl.Exchange != ""):
		return fmt.Errorf("dead_letter: {subject: SUBJECT} (a JetStream stream must capture it)")
	case s.AMQP != "" && (!brokerURL(s.AMQP, "amqp", "amqps") || s.Queue == ""):
		return fmt.Errorf("source: amqp: amqp://user:password@host:port/, with queue")
	case s.AMQP != "" && (dl.RoutingKey == "" || dl.Subject != ""):
		return fmt.Errorf(`dead_letter: {exchange: "", routing_key: QUEUE}`)
	}
	if k.KeyFrom == "" {
		k.KeyFrom = "header:Nats-Msg-Id"
		if s.AMQP != "" {
			k.KeyFrom = "message_id"
		}
	}
	return nil
}

func brokerURL(s string, schemes ...string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Host != "" && (u.Scheme == schemes[0] || u.Scheme == schemes[1])
}

func (c *Config) checkDeliver(k *Consumer) error {
	d := &k.Deliver
	if d.Action != "" {
		return fmt.Errorf("deliver: action is not supported yet: deliver to an upstream ({upstream, method, path})")
	}
	if _, ok := c.Upstreams[d.Upstream]; !ok {
		return fmt.Errorf("deliver: upstream %q is not defined", d.Upstream)
	}
	if d.Method == "" {
		d.Method = http.MethodPost
	}
	switch d.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return fmt.Errorf("deliver: method %q: want POST, PUT, PATCH or DELETE", d.Method)
	}
	if u, err := url.Parse(d.Path); err != nil || !strings.HasPrefix(d.Path, "/") || u.Path != d.Path {
		return fmt.Errorf("deliver: path %q: want /a/path, without a query", d.Path)
	}
	return nil
}

// LoadConsumers reads a configuration for idemgate consume: its
// store, upstreams and consumers, checked as the gateway checks them;
// routes are optional (it may be the gateway's own file).
func LoadConsumers(path string) (*Config, error) {
	cfg, err := LoadRelay(path)
	if err == nil && len(cfg.Consumers) == 0 {
		err = fmt.Errorf("%s: no consumers to run", path)
	}
	return cfg, err
}

// Relay is what the outbox's relay (idemgate relay) needs beyond the
// upstreams: the JetStream server and the subjects of the effects whose
// target is nats:SUBJECT.
type Relay struct {
	NATS     string   `yaml:"nats"`
	Subjects []string `yaml:"subjects"`

	line int
}

func (c *Config) checkRelay() error {
	r := c.Relay
	if r == nil {
		return nil
	}
	if !brokerURL(r.NATS, "nats", "tls") || len(r.Subjects) == 0 {
		return c.errorf(r.line, "relay: want {nats: nats://host:port, subjects: [SUBJECT, …]}")
	}
	for _, s := range r.Subjects {
		if s == "" || strings.ContainsAny(s, " \t\r\n*>") || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") {
			return c.errorf(r.line, "relay: subject %q: want a subject without wildcards (billing.out)", s)
		}
	}
	return nil
}
