package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/ledger"
)

// handle is a tool's handler: a guarded call goes through the keyed write
// path, any other is forwarded as it is.
func (ps *proxied) handle(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		t, m := ps.lookup(name)
		if t == nil {
			return refusal(contract.CodeNotFound, "the MCP server no longer lists the tool "+name+
				"; list the tools again", nil), nil
		}
		if !t.guarded {
			return ps.forward(ctx, req)
		}
		pr, ok := principalIn(req)
		if !ok {
			return nil, errors.New("no principal")
		}
		c, refused := ps.readCall(t, pr, req)
		if refused != nil {
			return refused, nil
		}
		return ps.guarded(ctx, req, m, c)
	}
}

// forward sends an unguarded call as it came: nothing is recorded.
func (ps *proxied) forward(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, ps.cfg.Timeout)
	defer cancel()
	ctx, span, meta := ps.toolSpan(ctx, req.Params.Name, "", forwardedMeta(req.Params.Meta))
	p := &mcp.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments, Meta: meta}
	res, err := ps.up.call(ctx, p)
	endToolSpan(span, res, err)
	if errors.Is(err, errNotSent) || errors.Is(err, errNoAnswer) {
		return refusal(contract.CodeUpstreamUnavailable, err.Error(), nil), nil
	}
	return res, err
}

// call is a guarded call, read and checked: its key, its arguments
// without the intent, and what goes with it upstream.
type call struct {
	tool      *tool
	principal approval.Principal
	namespace string // of key: the server's intents', or its clients' _meta keys'
	key       string
	args      []byte // the arguments, the intent removed
	meta      mcp.Meta
}

// readCall checks a guarded call before anything is reserved: a refusal
// here changes nothing and sends nothing.
func (ps *proxied) readCall(t *tool, pr approval.Principal, req *mcp.CallToolRequest) (*call, *mcp.CallToolResult) {
	raw := req.Params.Arguments
	args, err := fingerprint.Parse(raw, fingerprint.Limits{})
	obj, isObj := args.(map[string]any)
	switch {
	case len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null":
		obj, isObj, err = map[string]any{}, true, nil
	case err != nil:
		return nil, refusal(contract.CodeInvalidCommand, "the arguments are not valid JSON: "+err.Error(), nil)
	case !isObj:
		return nil, refusal(contract.CodeInvalidCommand, "the arguments must be a JSON object", nil)
	}
	intent, present := obj[t.intent]
	delete(obj, t.intent)
	key, ns, msg := keyOf(ps.cfg.Name, t, pr, intent, present, req.Params.Meta)
	if msg != "" {
		return nil, refusal(contract.CodeMissingKey, msg, nil)
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, refusal(contract.CodeInvalidCommand, err.Error(), nil)
	}
	return &call{tool: t, principal: pr, namespace: ns, key: key, args: body, meta: forwardedMeta(req.Params.Meta)}, nil
}

// keyOf is a call's key and its namespace: the client's own from _meta,
// in the server's clients' namespace (ledger.MCPMetaNamespace), else the
// one derived from the tool, the principal and the intent
// (contract.MCPIntentKey), in the server's (ledger.MCPNamespace): a
// client's key can never claim or replay an intent's. A refusal's message
// says what the model must send.
func keyOf(server string, t *tool, pr approval.Principal, intent any, present bool, meta mcp.Meta) (
	key, namespace, msg string) {
	if v, ok := meta[contract.MetaIdempotencyKey]; ok {
		s, _ := v.(string)
		k, err := httpidem.ParseKey(s)
		if err != nil {
			return "", "", "_meta[\"" + contract.MetaIdempotencyKey + "\"]: " + err.Error()
		}
		return k, ledger.MCPMetaNamespace(server), ""
	}
	s, _ := intent.(string)
	switch {
	case !present:
		return "", "", "the argument " + t.intent + " is required: " + intentDescription
	case s == "" || utf8.RuneCountInString(s) > MaxIntent || !printable(s):
		return "", "", "the argument " + t.intent + " must be 1 to 128 printable ASCII characters: " + intentDescription
	}
	return contract.MCPIntentKey(t.name, pr.Name, s), ledger.MCPNamespace(server), ""
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// forwardedMeta is what of a call's _meta goes upstream: all of it (its
// traceparent, its progress token) but the idempotency key, which is the
// proxy's.
func forwardedMeta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := mcp.Meta{}
	for k, v := range m {
		if k != contract.MetaIdempotencyKey {
			out[k] = v
		}
	}
	return out
}

// guarded takes a checked call through the keyed write path: a request of
// the caller's, keyed, whose handler forwards the call once.
func (ps *proxied) guarded(ctx context.Context, req *mcp.CallToolRequest, m *httpidem.Middleware, c *call) (
	*mcp.CallToolResult, error) {
	ctx = httpidem.WithNamespace(context.WithValue(ctx, callKey{}, c), c.namespace)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.tool.path, bytes.NewReader(c.args))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(contract.HeaderKey, quoteKey(c.key))
	if tp, ok := c.meta["traceparent"].(string); ok {
		r.Header.Set(contract.HeaderTraceparent, tp)
	}
	w := newAnswer()
	m.Handler(http.HandlerFunc(ps.send)).ServeHTTP(w, r)
	return ps.answer(ctx, req, w)
}

// quoteKey writes a key as a Structured-Field string, so that spaces at
// its ends are kept.
func quoteKey(k string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
}

type callKey struct{}

// send is the handler the keyed write path runs for an operation this
// call owns: it forwards the call, detached from the client (who may
// leave: the answer is recorded for its retry), and settles its fate.
func (ps *proxied) send(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(callKey{}).(*call)
	exec := httpidem.Current(r)
	body, _ := io.ReadAll(r.Body)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), ps.cfg.Timeout)
	defer cancel()
	ctx, span, meta := ps.toolSpan(ctx, c.tool.name, exec.OperationID(), c.meta)
	res, err := ps.up.call(ctx, &mcp.CallToolParams{Name: c.tool.name, Arguments: json.RawMessage(body), Meta: meta})
	endToolSpan(span, res, err)
	var rpc *jsonrpc.Error
	switch {
	case errors.Is(err, errNotSent):
		exec.Settle(contract.FateReleased, "mcp_not_connected")
		contract.NewProblem(contract.CodeUpstreamUnavailable, "the MCP server is not connected: nothing was sent; "+
			"call again with the same intent").Write(w)
		return
	case errors.As(err, &rpc):
		exec.Settle(contract.FateFailed, "mcp_error")
		writeEnvelope(w, envelope{Error: rpc})
		return
	case err != nil:
		code := "mcp_no_answer"
		if ctx.Err() != nil {
			code = "mcp_timeout"
		}
		exec.Settle(contract.FateUnknown, code)
		contract.NewProblem(contract.CodeOutcomeUnknown, "the call was sent to the MCP server and no answer came ("+
			code+"): it may have taken effect").WithStatus(http.StatusBadGateway).Write(w)
		return
	case res.IsError:
		exec.Settle(contract.FateFailed, "mcp_is_error")
	}
	writeEnvelope(w, envelope{Result: res})
}

// tenantOf and principalOf are the keyed write path's caller: the
// principal the proxy put in the request's context.
func tenantOf(r *http.Request) (string, error) {
	p, err := principalOf(r)
	return p.Tenant, err
}

func principalOf(r *http.Request) (approval.Principal, error) {
	if c, ok := r.Context().Value(callKey{}).(*call); ok {
		return c.principal, nil
	}
	return approval.Principal{}, errors.New("no principal")
}

// principalKey is where the caller's principal rides in the token info
// the SDK hands each request.
const principalKey = "idemgate.principal"

func principalIn(req *mcp.CallToolRequest) (approval.Principal, bool) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return approval.Principal{}, false
	}
	p, ok := req.Extra.TokenInfo.Extra[principalKey].(approval.Principal)
	return p, ok
}
