package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// mcpMetrics are the MCP proxy's sessions (docs/design.md, "MCP proxy"):
// how many clients' sessions are open, and how many the limits closed or
// refused. Its tool calls are counted with the requests, under their
// routes mcp:SERVER/TOOL.
type mcpMetrics struct {
	open    prometheus.Gauge
	expired prometheus.Counter
	refused *prometheus.CounterVec
}

// mcpLimits are the limits a session is refused at, as the proxy names
// them (mcpproxy.LimitPerPrincipal, LimitMax).
var mcpLimits = []string{"per_principal", "max"}

// newMCPMetrics registers the families, at zero. A configuration without
// mcp_servers has none of them: it has no sessions (mcp_servers are set
// at start-up).
func newMCPMetrics(m *Metrics, on bool) *mcpMetrics {
	if !on {
		return nil
	}
	c := &mcpMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "idemgate", Name: "mcp_sessions_open",
			Help: "MCP client sessions open on the proxy, of every server and principal."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "idemgate", Name: "mcp_sessions_expired_total",
			Help: "MCP client sessions closed for being idle past mcp_sessions.idle_timeout."}),
		refused: counter("mcp_sessions_refused_total", "New MCP client sessions refused, by the limit they met: "+
			"per_principal (mcp_sessions.max_per_principal) or max (mcp_sessions.max).", "limit"),
	}
	for _, l := range mcpLimits {
		c.refused.WithLabelValues(l)
	}
	m.Register(c.open, c.expired, c.refused)
	return c
}

// MCPSessions sets the open sessions' gauge (mcpproxy.Observer).
func (m *Metrics) MCPSessions(n int) {
	if m.mcp != nil {
		m.mcp.open.Set(float64(n))
	}
}

// MCPSessionExpired counts a session closed for being idle
// (mcpproxy.Observer).
func (m *Metrics) MCPSessionExpired() {
	if m.mcp != nil {
		m.mcp.expired.Inc()
	}
}

// MCPSessionRefused counts a new session refused at limit
// (mcpproxy.Observer).
func (m *Metrics) MCPSessionRefused(limit string) {
	if m.mcp != nil {
		m.mcp.refused.WithLabelValues(limit).Inc()
	}
}
