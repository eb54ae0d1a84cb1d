// Package config is idemgate's configuration (docs/design.md,
// "Configuration (YAML)"): the file read, checked (every mistake names its
// FILE:LINE) and compiled (approval policies, probes, schemas, webhook
// verifiers, the TLS files, which it reads again when they change), with
// the defaults of each setting. It builds no plane: cmd/ wires the
// gateway, the executor and the others from it.
package config

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/internal/size"
	"github.com/idemgate/idemgate/internal/yamlfile"
	"github.com/idemgate/idemgate/reconcile"
)

// Config is the YAML of docs/design.md, "Configuration".
type Config struct {
	Listen     string               `yaml:"listen"`
	Store      string               `yaml:"store"`
	Upstreams  map[string]*Upstream `yaml:"upstreams"`
	Principals []*Principal         `yaml:"principals"`
	// Operators name the configured principals who may act on the whole
	// gateway, every tenant's (a reload: config_operators.go); a tenant's
	// admin role is not enough.
	Operators []string `yaml:"operators"`
	// Tenants, if written, are the tenants this gateway serves: their
	// metrics start at zero, and a JWT of another tenant is refused
	// (config_tenants.go).
	Tenants []string `yaml:"tenants"`
	// Auth accepts tokens an identity provider signs, beside the
	// principals' own (docs/design.md, "Identity, transport and operations").
	Auth Auth `yaml:"auth"`
	// TLS serves the listener over TLS; MetricsTLS the metrics listener
	// (TLS's settings by default).
	TLS        *TLS     `yaml:"tls"`
	MetricsTLS *TLS     `yaml:"metrics_tls"`
	Routes     []*Route `yaml:"routes"`
	// Actions are the effects callers perform themselves, reserved and
	// recorded here (docs/design.md, "Actions").
	Actions []*Action `yaml:"actions"`
	// Consumers take messages from queues, each an operation delivered
	// through the data plane (docs/design.md, "Inbox").
	Consumers []*Consumer `yaml:"consumers"`
	// Relay names the JetStream server and subjects the outbox's relay
	// publishes to (effects whose target is nats:SUBJECT).
	Relay *Relay `yaml:"relay"`
	// MCPServers are the MCP servers proxied at /mcp/{name}, each guarded
	// tool call an operation (docs/design.md, "MCP proxy").
	MCPServers []*MCPServer `yaml:"mcp_servers"`
	// MCPSessions bound the sessions MCP clients hold of the proxy.
	MCPSessions MCPSessions `yaml:"mcp_sessions"`
	Limits      Limits      `yaml:"limits"`
	Audit       *Audit      `yaml:"audit"`
	// MetricsListen, if set, serves /metrics on this address instead of
	// the main listener (which then has none): scrapes stay off the API's
	// network.
	MetricsListen string `yaml:"metrics_listen"`
	// UI tunes the web page at /ui/.
	UI UI `yaml:"ui"`
	// Instance names this gateway in operation histories (default: host name).
	Instance string `yaml:"instance"`
	// SweepInterval and PurgeInterval pace the background work (1s, 1m);
	// ShutdownTimeout bounds a graceful stop (20s).
	SweepInterval   time.Duration `yaml:"sweep_interval"`
	PurgeInterval   time.Duration `yaml:"purge_interval"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// What one client may hold of the server (see NewServer): the time to
	// send its headers (read_header_timeout, 10s) and then its body
	// (body_timeout, 30s; the whole request must be in within the sum of
	// the two), an idle connection's life (idle_timeout, 2m),
	// the size of its headers (max_header_bytes, 64KiB), and the number of
	// connections served at once (max_conns, 4096; more wait to be
	// accepted), of which one client address (an IPv6 /64) holds at most
	// max_conns_per_client (a quarter of max_conns; behind a proxy or a
	// load balancer, which is one client, set it to max_conns).
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	BodyTimeout       time.Duration `yaml:"body_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	MaxHeaderBytes    Size          `yaml:"max_header_bytes"`
	MaxConns          int           `yaml:"max_conns"`
	MaxConnsPerClient int           `yaml:"max_conns_per_client"`
	// MaxResponse bounds a stored upstream answer (1MiB).
	MaxResponse Size `yaml:"max_response"`
	// RecordDeadline bounds how long an outcome is retried against a store
	// that is briefly unavailable, the answer held meanwhile (30s).
	RecordDeadline time.Duration `yaml:"record_deadline"`
	// HoldBeforeForward pauses every recorded write between its reservation
	// and its forwarding. Not YAML: the crash drills set it (through
	// IDEMGATE_DRILL_HOLD_BEFORE_FORWARD) to kill a gateway in that gap.
	HoldBeforeForward time.Duration `yaml:"-"`
	// Unobserved leaves the requests unobserved by the metrics (its
	// gauges and sweep counters remain). Not YAML: the benchmark sets it
	// to measure what observing costs, side by side.
	Unobserved bool `yaml:"-"`
	// Clock, if set, is the time read by the JWT checks, the JWKS's ages
	// and rate, the TLS files' checks and the web page's sessions
	// (time.Now otherwise). Not YAML: the tests move it instead of
	// sleeping.
	Clock func() time.Time `yaml:"-"`

	file     string
	noRoutes bool           // a relay's configuration: routes are optional
	lines    map[string]int // each top-level setting's line
}

// now is the configuration's clock (Clock, or time.Now).
func (c *Config) now() time.Time {
	if c.Clock != nil {
		return c.Clock()
	}
	return time.Now()
}

// Upstream is an API behind the gateway, with the credentials the gateway
// adds for it.
type Upstream struct {
	URL        string            `yaml:"url"`
	Timeout    time.Duration     `yaml:"timeout"`
	Headers    map[string]string `yaml:"headers"`
	ForwardKey bool              `yaml:"forward_key"`
	HonoursKey bool              `yaml:"honours_key"`
	// MaxConns sizes the idle connection pool to the expected concurrency.
	MaxConns int `yaml:"max_conns"`
	// Errors is the shape of every refusal on this upstream's routes, the
	// form its own clients read errors in (docs/design.md, "Error shapes").
	Errors Errors `yaml:"errors"`

	line        int
	headerLines map[string]int // each header's own line
	target      *url.URL
}

// Route is one configured method and path.
type Route struct {
	Match       string        `yaml:"match"`
	Upstream    string        `yaml:"upstream"`
	RequireKey  *bool         `yaml:"require_key"`
	Retention   time.Duration `yaml:"retention"`
	Lease       time.Duration `yaml:"lease"`
	MaxBody     Size          `yaml:"max_body"`
	Fingerprint struct {
		Headers     []string `yaml:"headers"`
		Ignore      []string `yaml:"ignore"`
		IgnoreQuery []string `yaml:"ignore_query"`
	} `yaml:"fingerprint"`
	// Body is "opaque" for a route whose bodies are neither JSON nor forms:
	// they are fingerprinted as their bytes and media type.
	Body           string `yaml:"body"`
	Schema         string `yaml:"schema"`
	BusinessKey    string `yaml:"business_key"`
	KeyFrom        string `yaml:"key_from"`
	ConcurrencyKey string `yaml:"concurrency_key"`
	// Outcomes lists upstream statuses known to mean "not applied" (the
	// operation is released) or "final" (stored and replayed), beyond
	// docs/design.md's defaults.
	Outcomes Outcomes `yaml:"outcomes"`
	// Roles, if set, are the roles allowed to call the route.
	Roles []string `yaml:"roles"`
	// Approval asks a human before the route's effect (docs/design.md,
	// "Approvals").
	Approval *approval.Config `yaml:"approval"`
	// ResultRef names where the upstream's answer holds its reference for
	// the effect: body:/id or header:X-Request-Id.
	ResultRef string `yaml:"result_ref"`
	// Reconcile declares the probe that settles the route's unknown
	// operations from proof (docs/design.md, "Reconciliation").
	Reconcile *reconcile.Config `yaml:"reconcile"`
	// Webhook authenticates the route by its sender's signature instead
	// of a bearer token (docs/design.md, "Inbox: messages and webhooks").
	Webhook *Webhook `yaml:"webhook"`

	line          int
	approvalLines map[string]int // each approval key's own line
	webhookLines  map[string]int // each webhook key's own line
	method        string
	pattern       string
	policy        *approval.Policy
	probe         *reconcile.Probe
	validate      func(any) (any, error)
}

// Size is a byte count written as 1024, 64KiB, 1MiB, 2MB...
type Size int64

// UnmarshalYAML reads a Size; 0 leaves a setting at its default (or, for
// a limit, unlimited).
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := size.Parse(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = Size(v)
	return nil
}

// Load reads, expands and checks a configuration file. Every mistake
// is an error naming the file and line.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// LoadRelay reads a configuration for the outbox's relay (idemgate
// relay): its store and upstreams, checked as the gateway checks them. A
// relay serves no requests, so a file without routes will do; routes that
// are there are checked all the same (it may be the gateway's own file).
func LoadRelay(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parseConfig(path, data, true)
}

// Parse is Load on data already read; name is used in errors
// and to resolve relative schema paths.
func Parse(name string, data []byte) (*Config, error) { return parseConfig(name, data, false) }

func parseConfig(name string, data []byte, noRoutes bool) (*Config, error) {
	cfg := &Config{file: name, noRoutes: noRoutes}
	root, err := yamlfile.Decode(name, data, cfg)
	if err != nil {
		return nil, err
	}
	recordLines(root, cfg)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (c *Config) errorf(line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", c.file, line, fmt.Sprintf(format, args...))
}

// check validates everything start-up depends on, and fills defaults.
func (c *Config) check() error {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Store == "" {
		return fmt.Errorf("%s: store is required (sqlite:PATH or postgres://…)", c.file)
	}
	c.defaults()
	if err := c.checkEntries(); err != nil {
		return err
	}
	for name, u := range c.Upstreams {
		if err := c.checkUpstream(name, u); err != nil {
			return err
		}
	}
	if err := c.checkTLS(); err != nil {
		return err
	}
	if err := c.checkAuth(); err != nil {
		return err
	}
	if err := c.checkPrincipals(); err != nil {
		return err
	}
	if err := c.checkOperators(); err != nil {
		return err
	}
	if err := c.checkUI(); err != nil {
		return err
	}
	if err := c.checkTenants(); err != nil {
		return err
	}
	if err := c.checkLimits(); err != nil {
		return err
	}
	if err := c.checkAudit(); err != nil {
		return err
	}
	if len(c.Routes) == 0 && len(c.Actions) == 0 && len(c.Consumers) == 0 && len(c.MCPServers) == 0 && !c.noRoutes {
		return fmt.Errorf("%s: no routes, actions, consumers or mcp_servers: the gateway would refuse everything", c.file)
	}
	if err := c.checkActions(); err != nil {
		return err
	}
	if err := c.checkConsumers(); err != nil {
		return err
	}
	if err := c.checkMCPServers(); err != nil {
		return err
	}
	if err := c.checkRelay(); err != nil {
		return err
	}
	mux := http.NewServeMux()
	for _, r := range c.Routes {
		if err := c.checkRoute(r, mux); err != nil {
			return err
		}
	}
	return nil
}

// checkEntries refuses an empty entry in a list ("-" alone), which YAML
// reads as nothing at all.
func (c *Config) checkEntries() error {
	for i, p := range c.Principals {
		if p == nil {
			return fmt.Errorf("%s: principals: entry %d is empty", c.file, i+1)
		}
	}
	for i, r := range c.Routes {
		if r == nil {
			return fmt.Errorf("%s: routes: entry %d is empty", c.file, i+1)
		}
	}
	for i, a := range c.Actions {
		if a == nil {
			return fmt.Errorf("%s: actions: entry %d is empty", c.file, i+1)
		}
	}
	return nil
}

func (c *Config) defaults() {
	if c.Instance == "" {
		c.Instance, _ = os.Hostname()
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = time.Second
	}
	if c.PurgeInterval <= 0 {
		c.PurgeInterval = time.Minute
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 20 * time.Second
	}
	if c.MaxResponse <= 0 {
		c.MaxResponse = 1 << 20
	}
	if c.RecordDeadline <= 0 {
		c.RecordDeadline = 30 * time.Second
	}
	c.serverDefaults()
}

// serverDefaults are the production limits of NewServer: generous for an
// agent on any network, short enough that a thousand stalled clients
// cost seconds, not the server.
func (c *Config) serverDefaults() {
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 30 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 4096
	}
	if c.MaxConnsPerClient <= 0 {
		c.MaxConnsPerClient = max(c.MaxConns/4, 1)
	}
}

func (c *Config) checkUpstream(name string, u *Upstream) error {
	if u == nil {
		return fmt.Errorf("%s: upstream %q is empty", c.file, name)
	}
	t, err := url.Parse(u.URL)
	if err != nil || (t.Scheme != "http" && t.Scheme != "https") || t.Host == "" {
		return c.errorf(u.line, "upstream %q: url %q: want http(s)://host[:port][/prefix]", name, u.URL)
	}
	u.target = t
	if u.HonoursKey && !u.ForwardKey {
		// Re-sending an unknown operation is safe only because the upstream
		// sees the same key and deduplicates: without the key, a second effect.
		return c.errorf(u.line, "upstream %q: honours_key needs forward_key: true", name)
	}
	if err := c.checkHeaders(name, u); err != nil {
		return err
	}
	if err := c.checkErrors(name, u); err != nil {
		return err
	}
	if u.Timeout <= 0 {
		u.Timeout = 30 * time.Second
	}
	if u.MaxConns <= 0 {
		u.MaxConns = 64
	}
	return nil
}

func (c *Config) checkRoute(r *Route, mux *http.ServeMux) (err error) {
	method, pattern, ok := strings.Cut(strings.TrimSpace(r.Match), " ")
	pattern = strings.TrimSpace(pattern)
	if !ok || method == "" || !strings.HasPrefix(pattern, "/") || strings.ToUpper(method) != method {
		return c.errorf(r.line, "route %q: want match: METHOD /path/{param}", r.Match)
	}
	r.method, r.pattern = method, pattern
	if _, ok := c.Upstreams[r.Upstream]; !ok {
		return c.errorf(r.line, "route %s: upstream %q is not defined", r.Match, r.Upstream)
	}
	if err := c.checkApproval(r); err != nil {
		return err
	}
	if err := c.checkReconcile(r); err != nil {
		return err
	}
	if err := c.checkWebhook(r); err != nil {
		return err
	}
	if err := r.checkPolicies(); err != nil {
		return c.errorf(r.line, "route %s: %v", r.Match, err)
	}
	if r.Schema != "" {
		r.Schema = c.relative(r.Schema)
		if r.validate, err = loadSchema(r.Schema); err != nil {
			return c.errorf(r.line, "route %s: schema: %v", r.Match, err)
		}
	}
	defer func() {
		if p := recover(); p != nil { // ServeMux panics on bad or conflicting patterns
			err = c.errorf(r.line, "route %s: %v", r.Match, p)
		}
	}()
	mux.Handle(r.method+" "+r.pattern, http.NotFoundHandler())
	return nil
}

// checkPolicies refuses policies that cannot work, before a single request
// is served.
func (r *Route) checkPolicies() error {
	for _, p := range append(slices.Clone(r.Fingerprint.Ignore), r.BusinessKey, r.ConcurrencyKey) {
		if toks, err := jsonptr.Parse(p); err != nil || (p != "" && len(toks) == 0) {
			return fmt.Errorf("JSON pointer %q: want /member/…", p)
		}
	}
	if kind, ref, _ := strings.Cut(r.KeyFrom, ":"); r.KeyFrom != "" &&
		!(kind == "header" && ref != "") && !(kind == "body" && strings.HasPrefix(ref, "/")) {
		return fmt.Errorf("key_from %q: want header:NAME or body:/pointer", r.KeyFrom)
	}
	if r.Lease < 0 || r.Retention < 0 {
		return errors.New("lease and retention must be positive")
	}
	if r.Body != "" && r.Body != "opaque" {
		return fmt.Errorf("body %q: the only setting is opaque (JSON and form bodies are read by default)", r.Body)
	}
	return r.Outcomes.check()
}

// Outcomes lists upstream statuses known to mean "not applied" (the
// operation is released, and run again by its retry) or "final" (stored
// and replayed), beyond docs/design.md's defaults: a route's, or a
// consumer's.
type Outcomes struct {
	NotApplied []int `yaml:"not_applied"`
	Final      []int `yaml:"final"`
}

func (o Outcomes) check() error {
	for _, st := range append(slices.Clone(o.NotApplied), o.Final...) {
		if st < 400 || st > 599 {
			// A success marked "not applied" would be run again: a second effect.
			return fmt.Errorf("outcomes: %d: only 4xx and 5xx statuses can be listed", st)
		}
		if slices.Contains(o.NotApplied, st) && slices.Contains(o.Final, st) {
			return fmt.Errorf("outcomes: %d is both not_applied and final", st)
		}
	}
	return nil
}

// Classify is docs/design.md's mapping with these exceptions.
func (o Outcomes) Classify(status int) contract.Fate {
	switch {
	case slices.Contains(o.NotApplied, status):
		return contract.FateReleased
	case slices.Contains(o.Final, status):
		return contract.FateFailed
	}
	return contract.DefaultClassify(status)
}

// Method and Pattern are the route's method and path pattern (Match,
// split and checked).
func (r *Route) Method() string  { return r.method }
func (r *Route) Pattern() string { return r.pattern }

// Policy is the route's approval policy, compiled (nil: none); Probe its
// reconciliation probe (nil: none); Validator its schema's check of a
// command (nil: none).
func (r *Route) Policy() *approval.Policy          { return r.policy }
func (r *Route) Probe() *reconcile.Probe           { return r.probe }
func (r *Route) Validator() func(any) (any, error) { return r.validate }

// Target is the upstream's URL, parsed.
func (u *Upstream) Target() *url.URL { return u.target }

// IsWrite reports whether the route records operations: every method but
// GET, HEAD and OPTIONS.
func (r *Route) IsWrite() bool {
	switch r.method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}
