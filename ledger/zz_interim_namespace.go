package ledger

// INTERIM (branch i30-exec): the names branch i30-ns defines; replaced by
// its merge.

// Kind is the surface an operation comes from.
type Kind string

// The kinds.
const (
	KindRoute    Kind = "route"
	KindAction   Kind = "action"
	KindMCP      Kind = "mcp"
	KindConsumer Kind = "consumer"
	KindWebhook  Kind = "webhook"
)

// NamespaceClients is the tenant's clients' namespace.
const NamespaceClients = "clients"

// OpKey names an operation.
type OpKey struct{ Tenant, Namespace, Key string }

// WebhookNamespace is a webhook route's.
func WebhookNamespace(path string) string { return "webhook" + path }

// ConsumerNamespace is a consumer's.
func ConsumerNamespace(name string) string { return "consumer/" + name }

// MCPNamespace is an MCP server's derived intent keys'.
func MCPNamespace(server string) string { return "mcp/" + server }

// MCPMetaNamespace is an MCP server's clients' own keys'.
func MCPMetaNamespace(server string) string { return "mcp-meta/" + server }
