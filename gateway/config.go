// Package gateway is `idemgate serve`: a reverse proxy that puts the
// idempotency contract (package httpidem) in front of any HTTP API, holds
// the upstream credentials, authenticates agents by bearer token, and
// serves the control API.
package gateway

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/internal/size"
	"github.com/idemgate/idemgate/limits"
)

// Config is the YAML of DESIGN.md, "Configuration".
type Config struct {
	Listen     string               `yaml:"listen"`
	Store      string               `yaml:"store"`
	Upstreams  map[string]*Upstream `yaml:"upstreams"`
	Principals []*Principal         `yaml:"principals"`
	Routes     []*RouteConfig       `yaml:"routes"`
	Limits     LimitsConfig         `yaml:"limits"`
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
	// connections served at once (max_conns, 4096; more wait to be accepted).
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	BodyTimeout       time.Duration `yaml:"body_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	MaxHeaderBytes    Size          `yaml:"max_header_bytes"`
	MaxConns          int           `yaml:"max_conns"`
	// MaxResponse bounds a stored upstream answer (1MiB).
	MaxResponse Size `yaml:"max_response"`
	// RecordDeadline bounds how long an outcome is retried against a store
	// that is briefly unavailable, the answer held meanwhile (30s).
	RecordDeadline time.Duration `yaml:"record_deadline"`
	// HoldBeforeForward pauses every recorded write between its reservation
	// and its forwarding. Not YAML: the crash drills set it (through
	// IDEMGATE_DRILL_HOLD_BEFORE_FORWARD) to kill a gateway in that gap.
	HoldBeforeForward time.Duration `yaml:"-"`

	file string
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

	line        int
	headerLines map[string]int // each header's own line
	target      *url.URL
}

// Principal is a caller: a bearer token (stored as its SHA-256) mapped to a
// name, a tenant and roles.
type Principal struct {
	Name        string   `yaml:"name"`
	Tenant      string   `yaml:"tenant"`
	Roles       []string `yaml:"roles"`
	TokenSHA256 string   `yaml:"token_sha256"`

	line int
	hash []byte
}

// RouteConfig is one configured method and path.
type RouteConfig struct {
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
	// DESIGN.md's defaults.
	Outcomes struct {
		NotApplied []int `yaml:"not_applied"`
		Final      []int `yaml:"final"`
	} `yaml:"outcomes"`
	// Roles, if set, are the roles allowed to call the route.
	Roles    []string  `yaml:"roles"`
	Approval yaml.Node `yaml:"approval"`

	line    int
	method  string
	pattern string
}

// LimitsConfig is DESIGN.md's per-tenant limits: a default for every
// tenant, and per-tenant settings that override it field by field.
type LimitsConfig struct {
	Default Limit            `yaml:"default"`
	Tenants map[string]Limit `yaml:"tenants"`
	// UsageInterval is how stale a tenant's usage may get (10s).
	UsageInterval time.Duration `yaml:"usage_interval"`

	lines map[string]int // "default", "tenants.NAME": where each is set
}

// Limit is one tenant's limits; an unset field takes the default's, and 0
// means unlimited.
type Limit struct {
	Rate      *string `yaml:"rate"` // "100/s", "6000/m"
	Burst     *int    `yaml:"burst"`
	MaxLive   *int64  `yaml:"max_live"`
	MaxStored *Size   `yaml:"max_stored"`
}

// Built-in limits, for a configuration that sets none: generous for one
// agent fleet, and a bound on what one tenant can fill the disk with.
var builtinLimit = Limit{Rate: ptr("1000/s"), Burst: ptr(2000), MaxLive: ptr(int64(10000)), MaxStored: ptr(Size(1 << 30))}

func ptr[T any](v T) *T { return &v }

// over returns l with the fields o sets taken from o.
func (l Limit) over(o Limit) Limit {
	if o.Rate != nil {
		l.Rate = o.Rate
	}
	if o.Burst != nil {
		l.Burst = o.Burst
	}
	if o.MaxLive != nil {
		l.MaxLive = o.MaxLive
	}
	if o.MaxStored != nil {
		l.MaxStored = o.MaxStored
	}
	return l
}

// Policy returns the limits of a tenant.
func (c *Config) Policy(tenant string) limits.Policy {
	l := builtinLimit.over(c.Limits.Default).over(c.Limits.Tenants[tenant])
	r, _ := limits.ParseRate(*l.Rate) // checked at load
	return limits.Policy{Rate: r, Burst: *l.Burst, MaxLive: *l.MaxLive, MaxStored: int64(*l.MaxStored)}
}

// limitLines finds where each limit is set in the limits: node.
func limitLines(line int, n *yaml.Node) map[string]int {
	lines := map[string]int{"default": line}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch key, val := n.Content[i], n.Content[i+1]; key.Value {
		case "default":
			lines["default"] = key.Line
		case "tenants":
			for j := 0; j+1 < len(val.Content); j += 2 {
				lines["tenants."+val.Content[j].Value] = val.Content[j].Line
			}
		}
	}
	return lines
}

// checkLimits refuses limits that cannot be read or make no sense.
func (c *Config) checkLimits() error {
	all := map[string]Limit{"default": c.Limits.Default}
	for name, l := range c.Limits.Tenants {
		all["tenants."+name] = l
	}
	for name, l := range all {
		l = builtinLimit.over(l)
		if _, err := limits.ParseRate(*l.Rate); err != nil {
			return c.errorf(c.Limits.lines[name], "limits.%s: %v", name, err)
		}
		if *l.Burst < 0 || *l.MaxLive < 0 || *l.MaxStored < 0 {
			return c.errorf(c.Limits.lines[name], "limits.%s: burst, max_live and max_stored must be 0 (unlimited) or more", name)
		}
	}
	if c.Limits.UsageInterval <= 0 {
		c.Limits.UsageInterval = 10 * time.Second
	}
	return nil
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

// LoadConfig reads, expands and checks a configuration file. Every mistake
// is an error naming the file and line.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig is LoadConfig on data already read; name is used in errors
// and to resolve relative schema paths.
func ParseConfig(name string, data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlError(name, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: empty configuration", name)
	}
	if err := expandEnv(name, &root); err != nil {
		return nil, err
	}
	if err := checkKnown(name, root.Content[0], reflect.TypeOf(Config{})); err != nil {
		return nil, err
	}
	cfg := &Config{file: name}
	if err := root.Decode(cfg); err != nil {
		return nil, yamlError(name, err)
	}
	recordLines(&root, cfg)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkKnown refuses any mapping key that names no field, at its line. (The
// decoder's own check is lost once the tree has been expanded, and a typo in
// a policy must not silently turn it off.)
func checkKnown(file string, n *yaml.Node, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.AliasNode:
		return checkKnown(file, n.Alias, t)
	case t == reflect.TypeOf(yaml.Node{}):
		return nil
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			f, ok := yamlField(t, n.Content[i].Value)
			if !ok {
				return fmt.Errorf("%s:%d: unknown key %q", file, n.Content[i].Line, n.Content[i].Value)
			}
			if err := checkKnown(file, n.Content[i+1], f.Type); err != nil {
				return err
			}
		}
	case (t.Kind() == reflect.Slice) && n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			if err := checkKnown(file, c, t.Elem()); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if err := checkKnown(file, n.Content[i], t.Elem()); err != nil {
				return err
			}
		}
	}
	return nil
}

// yamlField finds the struct field a YAML key names.
func yamlField(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.IsExported() && name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces ${NAME} in every scalar; an unset variable is an error.
func expandEnv(name string, n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing string
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			v, ok := os.LookupEnv(ref[2 : len(ref)-1])
			if !ok && missing == "" {
				missing = ref
			}
			return v
		})
		if missing != "" {
			return fmt.Errorf("%s:%d: %s is not set in the environment", name, n.Line, missing)
		}
	}
	for _, c := range n.Content {
		if err := expandEnv(name, c); err != nil {
			return err
		}
	}
	return nil
}

var yamlLine = regexp.MustCompile(`^line (\d+): `)

// yamlError rewrites the decoder's errors as FILE:LINE: message.
func yamlError(name string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			msgs[i] = name + ":" + yamlLine.ReplaceAllString(e, "$1: ")
		}
		return errors.New(strings.Join(msgs, "\n"))
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return fmt.Errorf("%s:%s", name, yamlLine.ReplaceAllString(strings.TrimPrefix(msg, "unmarshal errors:\n  "), "$1: "))
}

// recordLines notes where each upstream, principal and route is defined.
func recordLines(root *yaml.Node, cfg *Config) {
	doc := root.Content[0]
	for i := 0; i+1 < len(doc.Content); i += 2 {
		key, val := doc.Content[i].Value, doc.Content[i+1]
		switch key {
		case "upstreams":
			for j := 0; j+1 < len(val.Content); j += 2 {
				if u := cfg.Upstreams[val.Content[j].Value]; u != nil {
					u.line, u.headerLines = val.Content[j].Line, keyLines(val.Content[j+1], "headers")
				}
			}
		case "principals":
			for j, n := range val.Content {
				if j < len(cfg.Principals) {
					cfg.Principals[j].line = n.Line
				}
			}
		case "limits":
			cfg.Limits.lines = limitLines(doc.Content[i].Line, val)
		case "routes":
			for j, n := range val.Content {
				if j < len(cfg.Routes) {
					cfg.Routes[j].line = n.Line
				}
			}
		}
	}
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
	for name, u := range c.Upstreams {
		if err := c.checkUpstream(name, u); err != nil {
			return err
		}
	}
	if err := c.checkPrincipals(); err != nil {
		return err
	}
	if err := c.checkLimits(); err != nil {
		return err
	}
	if len(c.Routes) == 0 {
		return fmt.Errorf("%s: no routes: the gateway would refuse everything", c.file)
	}
	mux := http.NewServeMux()
	for _, r := range c.Routes {
		if err := c.checkRoute(r, mux); err != nil {
			return err
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
	if u.Timeout <= 0 {
		u.Timeout = 30 * time.Second
	}
	if u.MaxConns <= 0 {
		u.MaxConns = 64
	}
	return nil
}

func (c *Config) checkPrincipals() error {
	seen := map[string]bool{}
	for _, p := range c.Principals {
		h, err := hex.DecodeString(p.TokenSHA256)
		switch {
		case p.Name == "" || p.Tenant == "":
			return c.errorf(p.line, "principal needs a name and a tenant")
		case strings.Contains(p.Tenant, ":"):
			// The upstream sees "<tenant>:<key>" (UpstreamKey): a colon in a
			// tenant would let tenant "a:b" and key "c" meet tenant "a", key "b:c".
			return c.errorf(p.line, "principal %q: tenant %q may not contain ':'", p.Name, p.Tenant)
		case err != nil || len(h) != 32:
			return c.errorf(p.line, "principal %q: token_sha256 must be 64 hex digits (sha256 of the token)", p.Name)
		case seen[p.TokenSHA256]:
			return c.errorf(p.line, "principal %q: the same token as another principal", p.Name)
		}
		seen[p.TokenSHA256], p.hash = true, h
	}
	return nil
}

func (c *Config) checkRoute(r *RouteConfig, mux *http.ServeMux) (err error) {
	method, pattern, ok := strings.Cut(strings.TrimSpace(r.Match), " ")
	pattern = strings.TrimSpace(pattern)
	if !ok || method == "" || !strings.HasPrefix(pattern, "/") || strings.ToUpper(method) != method {
		return c.errorf(r.line, "route %q: want match: METHOD /path/{param}", r.Match)
	}
	r.method, r.pattern = method, pattern
	if _, ok := c.Upstreams[r.Upstream]; !ok {
		return c.errorf(r.line, "route %s: upstream %q is not defined", r.Match, r.Upstream)
	}
	if !r.Approval.IsZero() {
		return c.errorf(r.line, "route %s: approval is not supported yet; refusing to run it unapproved", r.Match)
	}
	if err := r.checkPolicies(); err != nil {
		return c.errorf(r.line, "route %s: %v", r.Match, err)
	}
	if r.Schema != "" && !filepath.IsAbs(r.Schema) {
		r.Schema = filepath.Join(filepath.Dir(c.file), r.Schema)
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
func (r *RouteConfig) checkPolicies() error {
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
	for _, st := range append(slices.Clone(r.Outcomes.NotApplied), r.Outcomes.Final...) {
		if st < 400 || st > 599 {
			// A success marked "not applied" would be run again: a second effect.
			return fmt.Errorf("outcomes: %d: only 4xx and 5xx statuses can be listed", st)
		}
		if slices.Contains(r.Outcomes.NotApplied, st) && slices.Contains(r.Outcomes.Final, st) {
			return fmt.Errorf("outcomes: %d is both not_applied and final", st)
		}
	}
	return nil
}

// IsWrite reports whether the route records operations: every method but
// GET, HEAD and OPTIONS.
func (r *RouteConfig) IsWrite() bool {
	switch r.method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}
