package server

import (
	"maps"
	"net/http"
	"slices"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/mcpproxy"
)

// mcpProxy builds the MCP proxy of the configured mcp_servers (nil for
// none): its tool calls take the gateway's own keyed write path, with its
// limits, audit log and metrics.
func (s *Server) mcpProxy(sn *snapshot) (*mcpproxy.Proxy, error) {
	if len(sn.cfg.MCPServers) == 0 {
		return nil, nil
	}
	servers := make([]mcpproxy.Server, 0, len(sn.cfg.MCPServers))
	for _, c := range sn.cfg.MCPServers {
		servers = append(servers, mcpServer(c))
	}
	ms := sn.cfg.MCPSessions
	return mcpproxy.New(mcpproxy.Options{Servers: servers, Executor: sn.gw.Executor(), Caller: gateway.CallerOf,
		Logger: s.log, Tracer: s.tracing.Tracer(), ApprovalURL: func(id string) string { return UIPrefix + "approvals/" + id },
		Sessions: mcpproxy.Sessions{IdleTimeout: ms.IdleTimeout, PerPrincipal: ms.MaxPerPrincipal, Max: ms.Max},
		Observer: s.metrics, Now: sn.cfg.Clock})
}

// mcpServer is one configured server as the proxy takes it.
func mcpServer(c *config.MCPServer) mcpproxy.Server {
	tools := make(map[string]mcpproxy.Tool, len(c.Tools))
	for name, t := range c.Tools {
		tools[name] = mcpproxy.Tool{Guard: t.Guard, Roles: t.Roles, BusinessKey: t.BusinessKey, ConcurrencyKey: t.ConcurrencyKey,
			Retention: t.Retention, Lease: t.Lease, Approval: t.Policy, MaxResult: int64(t.MaxResult)}
	}
	env := make([]string, 0, len(c.Env))
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		env = append(env, k+"="+c.Env[k])
	}
	return mcpproxy.Server{Name: c.Name, Command: c.Command, Env: env, URL: c.URL, Headers: c.Headers,
		Timeout: c.Timeout, Tools: tools, Roles: c.Roles, Tenants: c.Tenants, Isolation: c.Isolation,
		IsolatedIdle: c.IsolatedIdle}
}

// mountMCP serves the proxy at /mcp/{name}, behind the snapshot's bearer
// authentication and the tenant's request rate.
func (s *Server) mountMCP(sn *snapshot, mux *http.ServeMux) {
	if s.mcp != nil {
		mux.Handle(contract.MCPPath+"/", sn.gw.Authenticated(sn.gw.Limited(s.mcp.Handler())))
	}
}

// EndMCPStreams ends the MCP clients' event streams, and refuses new
// ones, before a graceful shutdown waits for the requests in flight: an
// idle client's stream would hold it for the whole shutdown_timeout.
func (s *Server) EndMCPStreams() {
	if s.mcp != nil {
		s.mcp.EndStreams()
	}
}

// MCP is the MCP proxy, nil without mcp_servers.
func (s *Server) MCP() *mcpproxy.Proxy { return s.mcp }
