package config

import (
	"strings"
	"testing"
	"time"
)

// TestConsumerConfig: consumers take their defaults, a consumers-only
// configuration is enough, and each mistake names its line.
func TestConsumerConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	const consumers = `consumers:
  - name: billing-events
    tenant: acme
    source: {nats: "nats://127.0.0.1:4222", stream: BILLING, consumer: idemgate-billing, subject: "billing.>"}
    deliver: {upstream: ops, path: /v1/invoices}
    dead_letter: {subject: billing.dead}
  - name: orders
    tenant: acme
    source: {amqp: "amqp://guest:guest@127.0.0.1:5672/", queue: orders}
    key_from: body:/order_id
    deliver: {upstream: ops, method: PUT, path: /v1/orders}
    dead_letter: {exchange: "", routing_key: orders.dead}
    concurrency: 8
    lease: 5s
relay: {nats: "nats://127.0.0.1:4222", subjects: [billing.out]}
`
	cfg, err := Parse("gw.yaml", []byte(goodConfig+consumers))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Consumers[0], cfg.Consumers[1]
	if a.KeyFrom != "header:Nats-Msg-Id" || a.Deliver.Method != "POST" || a.MaxDeliveries != 5 || a.Concurrency != 1 ||
		b.KeyFrom != "body:/order_id" || b.Concurrency != 8 || b.Lease != 5*time.Second || a.Route() != "consumer:billing-events" {
		t.Fatalf("consumers: %+v %+v", a, b)
	}
	only := strings.Split(goodConfig, "routes:")[0] + consumers
	if _, err := Parse("gw.yaml", []byte(only)); err != nil {
		t.Fatalf("a consumers-only configuration: %v", err)
	}
	cases := map[string]struct{ from, to, want string }{
		"bad name":        {"name: billing-events", "name: Billing/Events", `gw.yaml:21: consumer "Billing/Events": want a name`},
		"twice":           {"name: orders", "name: billing-events", `gw.yaml:26: consumer "billing-events" is defined twice`},
		"no tenant":       {"  - name: orders\n    tenant: acme", "  - name: orders\n    tenant: \"\"", `gw.yaml:26: consumer "orders": tenant`},
		"two sources":     {"queue: orders}", "queue: orders, nats: \"nats://x:1\"}", `gw.yaml:26: consumer "orders": source: one of`},
		"no stream":       {"stream: BILLING, ", "", `gw.yaml:21: consumer "billing-events": source: nats`},
		"bad key_from":    {"key_from: body:/order_id", "key_from: cookie:x", `gw.yaml:26: consumer "orders": key_from "cookie:x"`},
		"nats message_id": {"    deliver: {upstream: ops, path: /v1/invoices}", "    key_from: message_id\n    deliver: {upstream: ops, path: /v1/invoices}", `gw.yaml:21: consumer "billing-events": key_from message_id is AMQP's`},
		"no upstream":     {"upstream: ops, path: /v1/invoices", "upstream: opz, path: /v1/invoices", `gw.yaml:21: consumer "billing-events": deliver: upstream "opz"`},
		"bad method":      {"method: PUT", "method: GET", `gw.yaml:26: consumer "orders": deliver: method "GET"`},
		"bad path":        {"path: /v1/orders", "path: v1/orders", `gw.yaml:26: consumer "orders": deliver: path`},
		"action":          {"upstream: ops, method: PUT, path: /v1/orders", "action: order.create", `gw.yaml:26: consumer "orders": deliver: action is not supported yet`},
		"amqp dead":       {`{exchange: "", routing_key: orders.dead}`, "{subject: orders.dead}", `gw.yaml:26: consumer "orders": dead_letter`},
		"nats dead":       {"{subject: billing.dead}", "{}", `gw.yaml:21: consumer "billing-events": dead_letter`},
		"concurrency":     {"concurrency: 8", "concurrency: 5000", `gw.yaml:26: consumer "orders": lease, retention`},
		"unknown key":     {"    concurrency: 8", "    concurency: 8", `gw.yaml:32: unknown key "concurency"`},
		"relay subject":   {"subjects: [billing.out]", "subjects: [billing.>]", `gw.yaml:34: relay: subject "billing.>"`},
		"relay url":       {`relay: {nats: "nats://127.0.0.1:4222"`, `relay: {nats: "http://x"`, "gw.yaml:34: relay: want"},
	}
	for name, c := range cases {
		text := strings.Replace(goodConfig+consumers, c.from, c.to, 1)
		if text == goodConfig+consumers {
			t.Fatalf("%s: the mistake was not made", name)
		}
		_, err := Parse("gw.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
	}
}
