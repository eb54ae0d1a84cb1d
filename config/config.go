// Package config is idemgate's configuration (docs/design.md,
// "Configuration (YAML)"): the file read, checked (every mistake names its
// FILE:LINE) and compiled (approval policies, probes, schemas, webhook
// verifiers, the TLS files, which it reads again when they change), with
// the defaults of each setting. It builds no plane: cmd/ wires the
// gateway, the executor and the others from it.
package config

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/size"
	"github.com/idemgate/idemgate/internal/yamlfile"
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
