package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Kind is what surface an operation came through (docs/design.md,
// "Words"). It is stored with the operation, and never read from its
// route.
type Kind string

// The kinds of operations.
const (
	KindRoute    Kind = "route"    // a keyed HTTP write on a configured route
	KindAction   Kind = "action"   // an action's reservation: an effect its caller performs
	KindMCP      Kind = "mcp"      // a guarded MCP tool call
	KindConsumer Kind = "consumer" // a message a consumer took from a queue
	KindWebhook  Kind = "webhook"  // a signed webhook's delivery
)

// Kinds lists every kind.
var Kinds = []Kind{KindRoute, KindAction, KindMCP, KindConsumer, KindWebhook}

// Valid reports whether k is one of Kinds.
func (k Kind) Valid() bool {
	switch k {
	case KindRoute, KindAction, KindMCP, KindConsumer, KindWebhook:
		return true
	}
	return false
}

// An operation is unique by (tenant, namespace, key): a key means one
// thing within its namespace, and the same key in two namespaces names two
// operations, each reserved, completed and replayed on its own. The
// namespaces are the tenant's clients' (every HTTP route and every action,
// where a key reused on another route with another request is still
// refused), one per webhook route, one per consumer, and two per MCP
// server: one for the keys it derives from intents, one for the keys its
// clients send in _meta, so that a client's key can never claim or replay
// an intent's.

// NamespaceClients is the tenant's clients' namespace: the keys they send
// with HTTP routes and actions.
const NamespaceClients = "clients"

// MaxNamespaceLen bounds a namespace, as MaxKeyLen bounds a key.
const MaxNamespaceLen = 255

// WebhookNamespace is the namespace of a webhook route's deliveries, path
// its path pattern (which starts with "/"): "webhook/hooks/stripe".
func WebhookNamespace(path string) string { return "webhook" + path }

// ConsumerNamespace is the namespace of a consumer's messages.
func ConsumerNamespace(name string) string { return "consumer/" + name }

// MCPNamespace is the namespace of the keys an MCP server's proxy derives
// from its callers' intents (contract.MCPIntentKey).
func MCPNamespace(server string) string { return "mcp/" + server }

// MCPMetaNamespace is the namespace of the keys an MCP server's clients
// send in _meta.
func MCPMetaNamespace(server string) string { return "mcp-meta/" + server }

// OpKey is an operation's identity: its tenant, its key's namespace and
// its key.
type OpKey struct{ Tenant, Namespace, Key string }

// OpKey is the identity of the operation p reserves.
func (p ReserveParams) OpKey() OpKey {
	return OpKey{Tenant: p.Tenant, Namespace: p.Namespace, Key: p.Key}
}

// OpKey is the operation's identity.
func (op *Operation) OpKey() OpKey {
	return OpKey{Tenant: op.Tenant, Namespace: op.Namespace, Key: op.Key}
}

// Lookup is nil when k can name an operation, ErrInvalid without a
// namespace (a caller that forgot it), and ErrNotFound for the read what
// when a value is not Holdable: as Lookup does for single values.
func (k OpKey) Lookup(what string) error {
	if k.Namespace == "" {
		return invalid("%s: a key's namespace is required (%s for the clients' own)", what, NamespaceClients)
	}
	return Lookup(what, k.Tenant, k.Namespace, k.Key)
}

// validNamespace reports whether ns can be a namespace: 1 to
// MaxNamespaceLen bytes of UTF-8 text.
func validNamespace(ns string) bool { return ns != "" && len(ns) <= MaxNamespaceLen && cleanText(ns) }

// UpstreamKey is the Idempotency-Key an upstream (or an effect's target)
// sees for a tenant's key in a namespace. It sees one caller, the sender's
// credentials, for every tenant and every namespace: the bare key would
// let one tenant's request, or one namespace's, be deduplicated against,
// and answered with, another's.
//
// In the clients' namespace it is "<tenant>:<key>" ("acme:task-42"), as
// before namespaces were. In any other it is esc(tenant) "~"
// esc(namespace) "~" esc(key), where esc escapes '%' (first), '~' and ':'
// as %25, %7E and %3A: it has no ':', so it never equals a clients' form
// (which always has one), and the escaping makes it one string per
// triple. Past MaxKeyLen either is "sha256:" and the hex digest of that
// string, as unique and as stable.
func UpstreamKey(tenant, namespace, key string) string {
	k := tenant + ":" + key
	if namespace != NamespaceClients {
		k = upstreamEsc.Replace(tenant) + "~" + upstreamEsc.Replace(namespace) + "~" + upstreamEsc.Replace(key)
	}
	if len(k) <= MaxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// upstreamEsc escapes the separators of UpstreamKey's namespaced form. A
// Replacer replaces in one pass, so '%' is escaped before the escapes it
// writes could be read as escapes.
var upstreamEsc = strings.NewReplacer("%", "%25", "~", "%7E", ":", "%3A")
