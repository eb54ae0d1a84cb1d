package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// guard is the proxy's receiving middleware: tools/list lists the tools as
// their server wrote them; a tools/call is traced (its
// own trace, or the agent's), and one that is guarded goes through the
// executor; any other request goes on to the SDK (a tool that is not, to
// its handler: forward).
func (ps *proxied) guard(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "tools/list" {
			res, err := next(ctx, method, req)
			return ps.asWritten(res), err
		}
		call, ok := req.(*mcp.CallToolRequest)
		if method != "tools/call" || !ok || call.Params == nil {
			return next(ctx, method, req)
		}
		ctx, span := ps.callSpan(ctx, call)
		var ran *keyed.Result
		res, err := ps.serve(ctx, call, next, &ran)
		endCallSpan(span, ran, res, err)
		return res, err
	}
}

// serve is a tools/call: guarded, through the executor (ran is what it
// made of it), or not, to the SDK.
func (ps *proxied) serve(ctx context.Context, call *mcp.CallToolRequest, next mcp.MethodHandler, ran **keyed.Result) (mcp.Result, error) {
	pr, ok := principalOf(call.Extra)
	if !ok {
		return nil, errors.New("no principal")
	}
	if msg := ps.toolRefused(call.Params.Name, pr); msg != "" {
		return refusal(contract.CodeForbidden, msg, nil), nil
	}
	t := ps.lookup(call.Params.Name)
	if t == nil || !t.guards(call) {
		return next(ctx, "tools/call", call)
	}
	c, refused := ps.readCall(t, pr, call)
	if refused != nil {
		return refused, nil
	}
	res, err := ps.p.opts.Executor.Execute(ctx, c.cmd, ps.send(c))
	if err != nil {
		return nil, err
	}
	*ran = &res
	return ps.answer(ctx, call, res)
}

// guards reports whether call is guarded: its tool is, or it names a key
// (the intent argument, or _meta's) and the configuration did not say
// otherwise. A key that was recorded is never sent again because the
// server later calls its tool read-only.
func (t *tool) guards(call *mcp.CallToolRequest) bool {
	if t.guarded || t.configured {
		return t.guarded
	}
	if _, ok := call.Params.Meta[contract.MetaIdempotencyKey]; ok {
		return true
	}
	return t.intent != "" && hasMember(call.Params.Arguments, t.intent)
}

// hasMember reports whether raw is a JSON object with a member name.
func hasMember(raw json.RawMessage, name string) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return false
	}
	_, ok := obj[name]
	return ok
}

// forward sends an unguarded call, unrecorded: the intent argument, which
// the server never declared, and the proxy's marks are left out.
func (ps *proxied) forward(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, ps.cfg.Timeout)
	defer cancel()
	args := req.Params.Arguments
	if t := ps.lookup(req.Params.Name); t != nil && t.intent != "" && hasMember(args, t.intent) {
		var obj map[string]json.RawMessage
		_ = json.Unmarshal(args, &obj)
		delete(obj, t.intent)
		args, _ = json.Marshal(obj)
	}
	pr, _ := principalOf(req.Extra)
	ctx, span, meta := ps.toolSpan(ctx, req.Params.Name, "", forwardedMeta(req.Params.Meta))
	res, err := ps.call(ctx, pr, &mcp.CallToolParams{Name: req.Params.Name, Arguments: args, Meta: meta})
	endToolSpan(span, res, err)
	if errors.Is(err, errNotSent) || errors.Is(err, errNoAnswer) {
		return refusal(contract.CodeUpstreamUnavailable, err.Error(), nil), nil
	}
	if res != nil {
		res.Meta = unmarked(res.Meta)
	}
	return res, err
}

// call is a guarded call, read and checked: its command and what goes
// with it upstream.
type call struct {
	tool *tool
	cmd  *keyed.Command
	args []byte // the arguments, the intent removed
	meta mcp.Meta
}

// readCall checks a guarded call before anything is reserved: a refusal
// here changes nothing and sends nothing.
func (ps *proxied) readCall(t *tool, pr approval.Principal, req *mcp.CallToolRequest) (*call, *mcp.CallToolResult) {
	obj, msg := arguments(req.Params.Arguments)
	if msg != "" {
		return nil, refusal(contract.CodeInvalidCommand, msg, nil)
	}
	intent, present := obj[t.intent]
	delete(obj, t.intent)
	ns, key, msg := ps.keyOf(t, pr, intent, present, req.Params.Meta)
	if msg != "" {
		return nil, refusal(contract.CodeMissingKey, msg, nil)
	}
	var command any = obj
	if t.validate != nil {
		v, err := t.validate(command)
		if err != nil {
			return nil, refusal(contract.CodeInvalidCommand, err.Error(), nil)
		}
		command = v
	}
	if t.concurrent != nil && keyed.KeyValue(command, t.concurrent) == "" {
		return nil, refusal(contract.CodeInvalidCommand, "the arguments have no value at the tool's concurrency_key", nil)
	}
	body, err := json.Marshal(obj)
	fp, ferr := fingerprint.OfMCP(ps.cfg.Name, t.name, pr.Tenant, command)
	if err = errors.Join(err, ferr); err != nil {
		return nil, refusal(contract.CodeInvalidCommand, err.Error(), nil)
	}
	meta := forwardedMeta(req.Params.Meta)
	tp, _ := meta["traceparent"].(string)
	cmd := &keyed.Command{Policy: &t.policy, Tenant: pr.Tenant, Namespace: ns, Key: key, Fingerprint: fp,
		BusinessKey: keyed.KeyValue(command, t.business), ConcurrencyKey: keyed.KeyValue(command, t.concurrent),
		Principal: pr, Trace: contract.TraceID(tp), Target: contract.MCPTarget(ps.cfg.Name, t.name), Wait: ps.cfg.Timeout}
	if t.policy.Approval != nil {
		cmd.Approval = &keyed.ApprovalInput{Input: approval.Input{Method: "POST",
			Path: contract.MCPPath + "/" + ps.cfg.Name + "/tools/" + t.name, Body: command, Principal: pr},
			Command: command, Target: cmd.Target}
	}
	return &call{tool: t, cmd: cmd, args: body, meta: meta}, nil
}

// arguments reads a call's arguments: a JSON object (none is {}), or
// what is wrong with them.
func arguments(raw json.RawMessage) (map[string]any, string) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return map[string]any{}, ""
	}
	args, err := fingerprint.Parse(raw, fingerprint.Limits{})
	if err != nil {
		return nil, "the arguments are not valid JSON: " + err.Error()
	}
	obj, ok := args.(map[string]any)
	if !ok {
		return nil, "the arguments must be a JSON object"
	}
	return obj, ""
}

// keyOf is a call's namespace and key: the client's own from _meta, in
// the server's namespace of clients' keys; else the key of the tool, the
// principal and the intent (contract.MCPIntentKey, one per triple), in
// the server's namespace of intents, which no client's key can claim. A
// refusal's message says what the model must send.
func (ps *proxied) keyOf(t *tool, pr approval.Principal, intent any, present bool, meta mcp.Meta) (ns, key, msg string) {
	if v, ok := meta[contract.MetaIdempotencyKey]; ok {
		s, _ := v.(string)
		key, err := contract.ParseKey(s)
		if err != nil {
			return "", "", "_meta[\"" + contract.MetaIdempotencyKey + "\"]: " + err.Error()
		}
		return ledger.MCPMetaNamespace(ps.cfg.Name), key, ""
	}
	s, _ := intent.(string)
	switch {
	case !present:
		return "", "", "the argument " + t.intent + " is required: " + intentDescription
	case s == "" || utf8.RuneCountInString(s) > MaxIntent || !printable(s):
		return "", "", "the argument " + t.intent + " must be 1 to 128 printable ASCII characters: " + intentDescription
	}
	return ledger.MCPNamespace(ps.cfg.Name), contract.MCPIntentKey(t.name, pr.Name, s), ""
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
// traceparent, its progress token) but the idempotency key and the
// proxy's own marks.
func forwardedMeta(m mcp.Meta) mcp.Meta {
	if len(m) == 0 {
		return nil
	}
	out := mcp.Meta{}
	for k, v := range m {
		if k != contract.MetaIdempotencyKey && !contract.IsMark(k) {
			out[k] = v
		}
	}
	return out
}

// unmarked is an upstream's _meta without any mark in the proxy's
// namespace: only the proxy says what a result is.
func unmarked(m mcp.Meta) mcp.Meta {
	for k := range m {
		if contract.IsMark(k) {
			delete(m, k)
		}
	}
	return m
}

// send is the effect of a call this command owns: the call, sent once,
// and what its answer means. A call that never left (no session) is not
// sent; one sent that got no answer may have taken effect.
func (ps *proxied) send(c *call) keyed.Effect {
	return func(ctx context.Context, run *keyed.Run) (keyed.Outcome, error) {
		ctx, cancel := context.WithTimeout(ctx, ps.cfg.Timeout)
		defer cancel()
		ctx, span, meta := ps.toolSpan(ctx, c.tool.name, run.OperationID(), c.meta)
		res, err := ps.call(ctx, c.cmd.Principal, &mcp.CallToolParams{Name: c.tool.name, Arguments: json.RawMessage(c.args),
			Meta: meta})
		endToolSpan(span, res, err)
		if errors.Is(err, errNotSent) || errors.Is(err, errNoAnswer) {
			// The executor logs only the outcome's code: what failed is said
			// here, the url's secrets redacted (upstream.call).
			ps.up.log.Info("mcp server: call got no answer", slog.String("tool", c.tool.name),
				slog.String("operation_id", run.OperationID()), slog.String("error", err.Error()))
		}
		var rpc *jsonrpc.Error
		// A JSON-RPC error is a failure only when the server answered it
		// (upstream.call): one the SDK made of a lost connection, or the
		// proxy's stand-in for an answer too large to read, is no answer.
		switch {
		case errors.Is(err, errNotSent):
			return keyed.Outcome{}, contract.NotSent("mcp", err)
		case errors.Is(err, errNoAnswer) && ctx.Err() != nil:
			return keyed.Outcome{}, contract.NoAnswer("mcp", errors.Join(err, ctx.Err()))
		case errors.As(err, &rpc) && !errors.Is(err, errNoAnswer):
			return envelopeOutcome(contract.FateFailed, "mcp_error", envelope{Error: rpc}), nil
		case err != nil:
			return keyed.Outcome{}, contract.NoAnswer("mcp", err)
		case res.IsError:
			res.Meta = unmarked(res.Meta)
			return envelopeOutcome(contract.FateFailed, "mcp_is_error", envelope{Result: res}), nil
		}
		res.Meta = unmarked(res.Meta)
		return envelopeOutcome(contract.FateSucceeded, "mcp_result", envelope{Result: res}), nil
	}
}
