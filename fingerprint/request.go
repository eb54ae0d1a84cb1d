package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Prefix starts every request fingerprint, so the algorithm can change one
// day without old and new fingerprints ever comparing equal by accident.
const Prefix = "sha256:"

// Request is what a fingerprint covers: the method, the route template (so
// /v1/tickets/{id} stays one route), the values of its path parameters and
// the query string (so /v1/payment-intents/1/capture and /2/capture, or
// ?dry_run=true, never share a fingerprint), the tenant, the validated
// command and the headers the route names. Everything else (tracing headers,
// the key itself, connection data) is left out by design.
type Request struct {
	Method string
	Route  string
	Params map[string]string // path parameter values by name: {"id": "T-7"}
	// Query is the query string, name → values in their order, as
	// url.Values holds it; a name without values counts as absent.
	Query  map[string][]string
	Tenant string
	// Command is the parsed body after validation (ParseBody), nil when
	// there is none.
	Command any
	Headers map[string]string // only the headers the route names; names are case-insensitive
}

// Of returns the fingerprint of r: "sha256:" and the hex SHA-256 of the
// RFC 8785 canonical JSON of
//
//	{"method","route","params","query","tenant","command"[,"headers"]}
//
// where method is upper-case, params is {"name":"value",...} and query is
// {"name":["value",...],...}, each {} when empty, command is null when there
// is none, and headers, present only when the route names some, has
// lower-case names. For example POST /v1/tickets/T-7?notify=a&notify=b by
// tenant acme with body {"title":"x"}, route /v1/tickets/{id}:
//
//	{"command":{"title":"x"},"method":"POST","params":{"id":"T-7"},
//	"query":{"notify":["a","b"]},"route":"/v1/tickets/{id}","tenant":"acme"}
//
// (on one line). Any other implementation that builds this document gets the
// same fingerprint.
func Of(r Request) (string, error) {
	if r.Method == "" || r.Route == "" || r.Tenant == "" {
		return "", errors.New("fingerprint: method, route and tenant are required")
	}
	doc := map[string]any{
		"method":  strings.ToUpper(r.Method),
		"route":   r.Route,
		"params":  paramsDoc(r.Params),
		"query":   queryDoc(r.Query),
		"tenant":  r.Tenant,
		"command": r.Command,
	}
	if len(r.Headers) > 0 {
		h, err := headersDoc(r.Headers)
		if err != nil {
			return "", err
		}
		doc["headers"] = h
	}
	canon, err := Canonical(doc)
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	sum := sha256.Sum256(canon)
	return Prefix + hex.EncodeToString(sum[:]), nil
}

func paramsDoc(params map[string]string) map[string]any {
	doc := make(map[string]any, len(params))
	for name, value := range params {
		doc[name] = value
	}
	return doc
}

// queryDoc keeps every value in its order: ?a=1&a=2 and ?a=2&a=1 may mean
// different things to the upstream, so they fingerprint differently.
func queryDoc(query map[string][]string) map[string]any {
	doc := make(map[string]any, len(query))
	for name, values := range query {
		if len(values) == 0 {
			continue // no such parameter was sent
		}
		list := make([]any, len(values))
		for i, v := range values {
			list[i] = v
		}
		doc[name] = list
	}
	return doc
}

func headersDoc(headers map[string]string) (map[string]any, error) {
	doc := make(map[string]any, len(headers))
	for name, value := range headers {
		lower := strings.ToLower(name)
		if _, dup := doc[lower]; dup {
			return nil, fmt.Errorf("fingerprint: header %q named twice", lower)
		}
		doc[lower] = value
	}
	return doc, nil
}

// OfAction returns the fingerprint of an action's command (docs/design.md,
// "Actions"): "sha256:" and the hex SHA-256 of the RFC 8785 canonical JSON
// of {"action","tenant","command"}, command null when there is none. An
// action has no method, path or query: its name is what it does.
func OfAction(action, tenant string, command any) (string, error) {
	if action == "" || tenant == "" {
		return "", errors.New("fingerprint: action and tenant are required")
	}
	canon, err := Canonical(map[string]any{"action": action, "tenant": tenant, "command": command})
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	sum := sha256.Sum256(canon)
	return Prefix + hex.EncodeToString(sum[:]), nil
}

// OfMCP returns the fingerprint of a guarded MCP tool call (docs/design.md,
// "MCP proxy"): "sha256:" and the hex SHA-256 of the RFC 8785 canonical
// JSON of {"mcp","tool","tenant","arguments"}, the arguments without the
// caller's intent (which is the key, not what the call does). A tool call
// has no method, path or query: its server and tool are what it does.
func OfMCP(server, tool, tenant string, arguments any) (string, error) {
	if server == "" || tool == "" || tenant == "" {
		return "", errors.New("fingerprint: server, tool and tenant are required")
	}
	canon, err := Canonical(map[string]any{"mcp": server, "tool": tool, "tenant": tenant, "arguments": arguments})
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	sum := sha256.Sum256(canon)
	return Prefix + hex.EncodeToString(sum[:]), nil
}
