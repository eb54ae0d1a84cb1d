package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

const goodConfig = `listen: 127.0.0.1:0
store: sqlite:/tmp/x.db
upstreams:
  ops:
    url: http://127.0.0.1:9090
    timeout: 10s
    headers: {Authorization: "Bearer ${IDEMGATE_TEST_OPS_TOKEN}"}
    forward_key: true
principals:
  - {name: support-agent, tenant: acme, roles: [agent], token_sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
routes:
  - match: POST /v1/tickets
    upstream: ops
    retention: 24h
    lease: 30s
    max_body: 1MiB
    fingerprint: {headers: [], ignore: [/client_request_time]}
  - match: GET /v1/deployments/{id}
    upstream: ops
`

func TestParseConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	cfg, err := Parse("gw.yaml", []byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Upstreams["ops"]
	if u.Headers["Authorization"] != "Bearer s3cret" || !u.ForwardKey || u.Timeout.Seconds() != 10 {
		t.Fatalf("upstream %+v", u)
	}
	r := cfg.Routes[0]
	if r.method != "POST" || r.pattern != "/v1/tickets" || int64(r.MaxBody) != 1<<20 || r.Lease.Seconds() != 30 ||
		r.Fingerprint.Ignore[0] != "/client_request_time" || !r.IsWrite() || cfg.Routes[1].IsWrite() {
		t.Fatalf("route %+v", r)
	}
}

// TestServerSettings: the server's limits have production defaults, and
// each can be set.
func TestServerSettings(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	cfg, err := Parse("gw.yaml", []byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReadHeaderTimeout != 10*time.Second || cfg.BodyTimeout != 30*time.Second || cfg.IdleTimeout != 2*time.Minute ||
		cfg.MaxHeaderBytes != 64<<10 || cfg.MaxConns != 4096 || cfg.MaxConnsPerClient != 1024 {
		t.Fatalf("defaults: %+v", cfg)
	}
	set := "read_header_timeout: 2s\nbody_timeout: 5s\nidle_timeout: 1m\nmax_header_bytes: 16KiB\nmax_conns: 100\n" +
		"max_conns_per_client: 30\n"
	if cfg, err = Parse("gw.yaml", []byte(set+goodConfig)); err != nil {
		t.Fatal(err)
	}
	if cfg.ReadHeaderTimeout != 2*time.Second || cfg.BodyTimeout != 5*time.Second || cfg.IdleTimeout != time.Minute ||
		cfg.MaxHeaderBytes != 16<<10 || cfg.MaxConns != 100 || cfg.MaxConnsPerClient != 30 {
		t.Fatalf("set: %+v", cfg)
	}
	if cfg, err = Parse("gw.yaml", []byte("max_conns: 2\n"+goodConfig)); err != nil || cfg.MaxConnsPerClient != 1 {
		t.Fatalf("a quarter of 2: %+v %v", cfg, err)
	}
}

// TestUpstreamHeadersMustBeHTTPFields: a header the transport would refuse
// on every request is refused at start-up, at its own line, without its
// value (a credential).
func TestUpstreamHeadersMustBeHTTPFields(t *testing.T) {
	const headers = `    headers: {Authorization: "Bearer ${IDEMGATE_TEST_OPS_TOKEN}"}`
	const refused = `upstream "ops": header Authorization: the value is not a valid HTTP field value`
	cases := map[string]struct{ token, headers, want string }{
		"newline from env": {"s3cret\nX-Admin: yes", headers, "gw.yaml:7: " + refused},
		"carriage return":  {"s3cret\r", headers, "gw.yaml:7: " + refused},
		"NUL":              {"s3cret", `    headers: {Authorization: "s3\0cret"}`, "gw.yaml:7: " + refused},
		"own line": {"s3cret", "    headers:\n      X-Tenant: acme\n      Authorization: \"${IDEMGATE_TEST_OPS_TOKEN}\\n\"",
			"gw.yaml:9: " + refused},
		"bad name":   {"s3cret", `    headers: {"X Tenant": acme}`, `gw.yaml:7: upstream "ops": header name "X Tenant" is not a valid`},
		"name twice": {"s3cret", `    headers: {X-Tenant: a, x-tenant: b}`, `gw.yaml:7: upstream "ops": header X-Tenant is given twice`},
	}
	for name, c := range cases {
		t.Setenv("IDEMGATE_TEST_OPS_TOKEN", c.token)
		text := strings.Replace(goodConfig, headers, c.headers, 1)
		_, err := Parse("gw.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3") {
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
	}
}

func TestConfigMistakesNameFileAndLine(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	cases := map[string]struct{ from, to, want string }{
		"unknown key":         {"    lease: 30s", "    lease: 30s\n    leese: 10s", `gw.yaml:16: unknown key "leese"`},
		"unknown nested key":  {"fingerprint: {headers: []", "fingerprint: {header: []", `gw.yaml:17: unknown key "header"`},
		"unknown top key":     {"listen:", "lissen:", `gw.yaml:1: unknown key "lissen"`},
		"bad route":           {"match: POST /v1/tickets", "match: POST v1/tickets", `gw.yaml:12: route "POST v1/tickets"`},
		"bad wildcard":        {"/v1/deployments/{id}", "/v1/deployments/{id", "gw.yaml:18: route GET /v1/deployments/{id"},
		"missing upstream":    {"  - match: GET /v1/deployments/{id}\n    upstream: ops", "  - match: GET /v1/deployments/{id}\n    upstream: opz", `gw.yaml:18: route GET /v1/deployments/{id}: upstream "opz" is not defined`},
		"unset env":           {"${IDEMGATE_TEST_OPS_TOKEN}", "${IDEMGATE_TEST_UNSET_VAR}", "gw.yaml:7: ${IDEMGATE_TEST_UNSET_VAR} is not set"},
		"bad size":            {"max_body: 1MiB", "max_body: 1 furlong", `gw.yaml:16: size "1 furlong"`},
		"bad duration":        {"lease: 30s", "lease: soon", "gw.yaml:15: cannot unmarshal !!str `soon` into time.Duration"},
		"bad token hash":      {`token_sha256: "9f86`, `token_sha256: "zz86`, "gw.yaml:10: principal \"support-agent\": token_sha256"},
		"bad url":             {"url: http://127.0.0.1:9090", "url: 127.0.0.1:9090", `gw.yaml:4: upstream "ops": url`},
		"approval syntax":     {"    upstream: ops\n    retention", "    upstream: ops\n    approval:\n      ttl: 5m\n      when: 'body.x =='\n    retention", "gw.yaml:16: route POST /v1/tickets: approval: when: ERROR"},
		"approval not bool":   {"    upstream: ops\n    retention", "    upstream: ops\n    approval:\n      when: '1 + 2'\n    retention", "gw.yaml:15: route POST /v1/tickets: approval: when:"},
		"approval variable":   {"    upstream: ops\n    retention", "    upstream: ops\n    approval:\n      when: 'bodee.x == 1'\n    retention", "gw.yaml:15: route POST /v1/tickets: approval: when:"},
		"approval summary":    {"    upstream: ops\n    retention", "    upstream: ops\n    approval:\n      summary: 'Deploy {{.body.x'\n    retention", "gw.yaml:15: route POST /v1/tickets: approval: summary:"},
		"approval ttl":        {"    upstream: ops\n    retention", "    upstream: ops\n    approval:\n      ttl: -5m\n    retention", "gw.yaml:15: route POST /v1/tickets: approval: ttl:"},
		"approval keyless":    {"    upstream: ops\n    retention", "    upstream: ops\n    require_key: false\n    approval: {}\n    retention", "gw.yaml:12: route POST /v1/tickets: approval: needs require_key"},
		"approval key":        {"    upstream: ops\n    retention", "    upstream: ops\n    approval: {whem: 'true'}\n    retention", `gw.yaml:14: unknown key "whem"`},
		"approval on a read":  {"  - match: GET /v1/deployments/{id}\n    upstream: ops", "  - match: GET /v1/deployments/{id}\n    upstream: ops\n    approval: {}", "gw.yaml:18: route GET /v1/deployments/{id}: approval: only write routes"},
		"bad yaml":            {"routes:", "routes: [", "gw.yaml:"},
		"no store":            {"store: sqlite:/tmp/x.db\n", "", "gw.yaml: store is required"},
		"honours without key": {"    forward_key: true", "    honours_key: true", `gw.yaml:4: upstream "ops": honours_key needs forward_key`},
		"success not applied": {"    lease: 30s", "    lease: 30s\n    outcomes: {not_applied: [201]}", "gw.yaml:12: route POST /v1/tickets: outcomes: 201"},
		"bad pointer":         {"    lease: 30s", "    lease: 30s\n    business_key: source_event_id", `gw.yaml:12: route POST /v1/tickets: JSON pointer "source_event_id"`},
		"colon in tenant":     {"tenant: acme,", "tenant: \"acme:eu\",", `gw.yaml:10: principal "support-agent": tenant "acme:eu" may not contain ':'`},
		"bad key_from":        {"    lease: 30s", "    lease: 30s\n    key_from: cookie:x", `gw.yaml:12: route POST /v1/tickets: key_from "cookie:x"`},
	}
	for name, c := range cases {
		text := strings.Replace(goodConfig, c.from, c.to, 1)
		if text == goodConfig {
			t.Fatalf("%s: the mistake was not made", name)
		}
		_, err := Parse("gw.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
	}
}

// TestExampleConfig keeps examples/gateway.yaml and its schemas valid.
// It runs clean on a fresh machine (issue 34, item 28): it needs nothing
// but its store and the ops API, so its consumer, which needs a stream the
// operator makes, is left commented; uncommented, it is valid too.
func TestExampleConfig(t *testing.T) {
	t.Setenv("OPS_API_TOKEN", "example")
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_example")
	cfg, err := Load("../examples/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cfg.Routes {
		if r.Schema != "" {
			if _, err := loadSchema(r.Schema); err != nil {
				t.Errorf("%s: %v", r.Schema, err)
			}
		}
	}
	if len(cfg.Consumers) != 0 {
		t.Errorf("the example has %d consumers: on a machine without their stream, serve logs \"stream not found\" "+
			"for ever", len(cfg.Consumers))
	}
	text, err := os.ReadFile("../examples/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	block, ok := commentedBlock(string(text), "#consumers:")
	if !ok {
		t.Fatal("no commented consumers: block in the example")
	}
	enabled, err := Parse("../examples/gateway.yaml", []byte(string(text)+block))
	if err != nil || len(enabled.Consumers) != 1 {
		t.Fatalf("the example's consumer, uncommented: %v", err)
	}
}

// commentedBlock is the block of text from the line that starts with
// start to the last commented line after it, uncommented ("#" and one
// space taken off each line).
func commentedBlock(text, start string) (string, bool) {
	i := strings.Index(text, "\n"+start)
	if i < 0 {
		return "", false
	}
	var b strings.Builder
	for _, line := range strings.Split(text[i+1:], "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		line = strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ")
		if strings.HasPrefix(line, "consumers:") || strings.HasPrefix(line, " ") {
			b.WriteString(line + "\n")
		}
	}
	return b.String(), true
}

// TestActionConfig: actions take their defaults, an actions-only
// configuration serves, and each mistake names its line.
func TestActionConfig(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_OPS_TOKEN", "s3cret")
	const actions = `actions:
  - name: support.reply.send
    lease: 10s
  - name: refund.pay
    approval: {when: 'body.amount > 100', approvers: [admin]}
    upstream: ops
    reconcile: {probe: 'GET /v1/refunds?ref={{.body.ref}}', applied: 'body.count == 1', not_applied: 'body.count == 0'}
`
	cfg, err := Parse("gw.yaml", []byte(goodConfig+actions))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Action("support.reply.send"), cfg.Action("refund.pay")
	if a == nil || a.Lease != 10*time.Second || a.MaxResult != 64<<10 || b == nil || b.Lease != 30*time.Second ||
		b.policy == nil || b.probe == nil || cfg.Action("nope") != nil {
		t.Fatalf("actions: %+v %+v", a, b)
	}
	only := strings.Split(goodConfig, "routes:")[0] + actions
	if _, err := Parse("gw.yaml", []byte(only)); err != nil {
		t.Fatalf("an actions-only configuration: %v", err)
	}
	cases := map[string]struct{ from, to, want string }{
		"bad name":         {"name: support.reply.send", "name: Support/Reply", `gw.yaml:21: action "Support/Reply": want a name`},
		"twice":            {"name: refund.pay", "name: support.reply.send", `gw.yaml:23: action "support.reply.send" is defined twice`},
		"negative lease":   {"lease: 10s", "lease: -10s", "gw.yaml:21: action support.reply.send: lease, retention"},
		"probe upstream":   {"    upstream: ops\n    reconcile", "    reconcile", "gw.yaml:23: action refund.pay: reconcile and upstream go together"},
		"unknown upstream": {"upstream: ops\n    reconcile", "upstream: opz\n    reconcile", `gw.yaml:23: action refund.pay: upstream "opz" is not defined`},
		"approval syntax":  {"when: 'body.amount > 100'", "when: 'body.amount >'", "gw.yaml:24: action refund.pay: approval: when:"},
		"bad pointer":      {"    lease: 10s", "    lease: 10s\n    business_key: ticket", `gw.yaml:21: action support.reply.send: JSON pointer "ticket"`},
		"unknown key":      {"    lease: 10s", "    lease: 10s\n    leese: 1s", `gw.yaml:23: unknown key "leese"`},
	}
	for name, c := range cases {
		text := strings.Replace(goodConfig+actions, c.from, c.to, 1)
		if text == goodConfig+actions {
			t.Fatalf("%s: the mistake was not made", name)
		}
		_, err := Parse("gw.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
	}
}
