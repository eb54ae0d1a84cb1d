package config

import (
	"encoding/json"
	"fmt"
	"strings"
)

// This file says which settings a reload may change (docs/design.md,
// "Identity, transport and operations"). A reload builds a new gateway
// from the whole file: routes, actions, principals, limits, upstreams,
// error shapes and the web page's settings change for new requests. What
// was bound at start-up (the store, the listeners and their server, the
// audit sealer, the background work's pace, the instance's name) cannot
// change under a running process: a file that changes one is refused,
// whole, and the running configuration stays.

// restartSetting is one setting bound at start-up, read from a
// configuration as text so that two can be compared.
type restartSetting struct {
	name string
	of   func(c *Config) string
}

// restartSettings are the settings a reload refuses to change. Another
// setting read only at start-up joins this list, or it would be ignored
// silently by a reload.
var restartSettings = []restartSetting{
	{"store", func(c *Config) string { return c.Store }},
	{"listen", func(c *Config) string { return c.Listen }},
	{"metrics_listen", func(c *Config) string { return c.MetricsListen }},
	{"audit", func(c *Config) string {
		if c.Audit == nil {
			return ""
		}
		a := *c.Audit
		return fmt.Sprint(a.SigningKey, a.CheckpointEvery, a.CheckpointInterval, a.CheckpointsFile)
	}},
	{"instance", func(c *Config) string { return c.Instance }},
	{"sweep_interval", func(c *Config) string { return c.SweepInterval.String() }},
	{"purge_interval", func(c *Config) string { return c.PurgeInterval.String() }},
	{"shutdown_timeout", func(c *Config) string { return c.ShutdownTimeout.String() }},
	{"read_header_timeout", func(c *Config) string { return c.ReadHeaderTimeout.String() }},
	{"body_timeout", func(c *Config) string { return c.BodyTimeout.String() }},
	{"idle_timeout", func(c *Config) string { return c.IdleTimeout.String() }},
	{"max_header_bytes", func(c *Config) string { return fmt.Sprint(c.MaxHeaderBytes) }},
	{"max_conns", func(c *Config) string { return fmt.Sprint(c.MaxConns) }},
	{"max_conns_per_client", func(c *Config) string { return fmt.Sprint(c.MaxConnsPerClient) }},
	{"limits.usage_interval", func(c *Config) string { return c.Limits.UsageInterval.String() }},
	// The listeners' TLS is built at start; its files' contents rotate
	// without a reload (tls.go), their paths need a restart.
	{"tls", func(c *Config) string { return tlsPaths(c.TLS) }},
	{"metrics_tls", func(c *Config) string { return tlsPaths(c.MetricsTLS) }},
	// The MCP proxy holds its upstreams' processes and sessions.
	{"mcp_servers", func(c *Config) string { return mcpServersOf(c) }},
	{"mcp_sessions", func(c *Config) string { return fmt.Sprintf("%+v", c.MCPSessions) }},
	// Consumers hold their broker connections from the start; what a
	// message is delivered to (deliver, tenant, lease, retention) may
	// change.
	{"consumers", func(c *Config) string {
		var b strings.Builder
		for _, k := range c.Consumers {
			fmt.Fprintf(&b, "%s|%+v|%s|%d|%+v|%d;", k.Name, k.Source, k.KeyFrom, k.MaxDeliveries, k.DeadLetter, k.Concurrency)
		}
		return b.String()
	}},
}

// tlsPaths is what a reload compares of a TLS setting: its files.
func tlsPaths(t *TLS) string {
	if t == nil {
		return ""
	}
	return fmt.Sprint(t.Cert, "|", t.Key, "|", t.ClientCA)
}

// Reloadable reports whether next may replace c in a running process:
// an error naming every setting next changes that needs a restart, or
// nil. Both must be checked configurations (Load's).
func (c *Config) Reloadable(next *Config) error {
	var changed []string
	for _, s := range restartSettings {
		if s.of(c) != s.of(next) {
			changed = append(changed, s.name)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s changed: that needs a restart (idemgate serve binds it at start-up); "+
		"the running configuration is kept", next.file, strings.Join(changed, ", "))
}

// File is the configuration's file, as it was loaded.
func (c *Config) File() string { return c.file }

// mcpServersOf is what a reload compares of mcp_servers: their settings
// as JSON (pointers followed, maps sorted), so that the same file read
// twice compares equal.
func mcpServersOf(c *Config) string {
	b, err := json.Marshal(c.MCPServers)
	if err != nil {
		return "unreadable: " + err.Error() // never equal to a readable one
	}
	return string(b)
}
