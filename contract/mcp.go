package contract

import "strings"

// The MCP proxy (docs/design.md, "MCP proxy"): a guarded tool call is an
// operation whose route names its server and tool.
const (
	// MCPPath is where the proxy serves an MCP server: MCPPath + "/" + name.
	MCPPath = "/mcp"
	// mcpRoutePrefix starts the route of a tool call's operations.
	mcpRoutePrefix = "mcp:"
	// MetaIdempotencyKey is the client's own key for a call, in
	// params._meta, used instead of the intent's when it is sent.
	MetaIdempotencyKey = "io.modelcontextprotocol/idempotency-key"
	// MetaReplayed and MetaOperation mark a replayed result; MetaCode
	// carries the problem code of a refused call.
	MetaReplayed  = "io.idemgate/replayed"
	MetaOperation = "io.idemgate/operation"
	MetaCode      = "io.idemgate/code"
	// MetaApproval and MetaApprovalURL name the approval a call waits for.
	MetaApproval    = "io.idemgate/approval"
	MetaApprovalURL = "io.idemgate/approval_url"
)

// MCPRoute is the route of a tool call's operations, "mcp:SERVER/TOOL":
// the metrics' route label, and never an HTTP route's "METHOD /path".
func MCPRoute(server, tool string) string { return mcpRoutePrefix + server + "/" + tool }

// MCPTarget is the target of a tool call's operations, "MCP SERVER/TOOL".
func MCPTarget(server, tool string) string { return "MCP " + server + "/" + tool }

// MCPOf returns the server and tool an operation's route names, if it is
// a tool call's.
func MCPOf(route string) (server, tool string, ok bool) {
	rest, ok := strings.CutPrefix(route, mcpRoutePrefix)
	if !ok {
		return "", "", false
	}
	server, tool, ok = strings.Cut(rest, "/")
	return server, tool, ok
}
