package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/idemgate/idemgate/ledger"
)

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

// MCPIntentKey is the key the MCP proxy derives for a guarded call from
// its tool, its caller's principal and its intent, in its server's
// namespace (ledger.MCPNamespace): esc(tool) "/" esc(principal) "/"
// esc(intent), where esc writes "%" as "%25" (first), then "/" as "%2F".
// The escaped parts hold no "/", so a key is one triple's only: bot and
// x/job-c1 give bot/x%2Fjob-c1, bot/x and job-c1 give bot%2Fx/job-c1. One
// longer than ledger.MaxKeyLen bytes is "sha256:" and the hex SHA-256 of
// that string: as unique, and never another triple's unhashed form,
// which has two "/" where it has none.
func MCPIntentKey(tool, principal, intent string) string {
	key := mcpKeyEsc.Replace(tool) + "/" + mcpKeyEsc.Replace(principal) + "/" + mcpKeyEsc.Replace(intent)
	if len(key) <= ledger.MaxKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// mcpKeyEsc is MCPIntentKey's escaping. A Replacer replaces in one pass,
// so the "%" of an escape it writes is never escaped again.
var mcpKeyEsc = strings.NewReplacer("%", "%25", "/", "%2F")
