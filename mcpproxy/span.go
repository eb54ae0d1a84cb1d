package mcpproxy

import (
	"cmp"
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
)

// A tool call's spans follow OpenTelemetry's conventions for MCP and
// GenAI tool execution ("{mcp.method.name} {gen_ai.tool.name}", a client
// span), with idemgate's operation attributes. Never the arguments, the
// intent or the key: they are the caller's data.
var (
	attrMethod    = attribute.Key("mcp.method.name").String("tools/call")
	attrOperation = attribute.Key("gen_ai.operation.name").String("execute_tool")
	keyTool       = attribute.Key("gen_ai.tool.name")
	keyServer     = attribute.Key("idemgate.mcp.server")
	keyOpID       = attribute.Key("idemgate.operation.id")
	keyReplayed   = attribute.Key("idemgate.replayed")
	keyErrorType  = attribute.Key("error.type")
)

// traceContext is the W3C trace context, the format of a traceparent in
// params._meta (as MCP's conventions carry it).
var traceContext = propagation.TraceContext{}

// metaCarrier reads and writes trace context in a call's _meta.
type metaCarrier mcp.Meta

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// callSpan starts the span of a tool call the proxy serves (a server
// span, "tools/call TOOL"), the root of everything the call does here:
// its ledger steps and the call sent upstream are its children. Its
// parent is the traceparent in the call's _meta (the agent's trace), else
// the one of the POST that carried it (Extra.Header: the listener's span
// of that request, or the client's header), else none: a trace of its
// own. Never the span of ctx: go-sdk hands a call the context of its
// session's initialize request, long ended.
func (ps *proxied) callSpan(ctx context.Context, req *mcp.CallToolRequest) (context.Context, trace.Span) {
	tr := ps.p.opts.Tracer
	if tr == nil {
		return ctx, nil
	}
	sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(), metaCarrier(req.Params.Meta)))
	if !sc.IsValid() && req.Extra != nil {
		sc = trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.HeaderCarrier(req.Extra.Header)))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrMethod,
		attrOperation, keyTool.String(req.Params.Name), keyServer.String(ps.cfg.Name))}
	if sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	return tr.Start(ctx, "tools/call "+req.Params.Name, opts...)
}

// endCallSpan ends a served call's span with what became of it: its
// operation, whether it was replayed, and a refusal's code.
func endCallSpan(span trace.Span, op *keyed.Result, res mcp.Result, err error) {
	if span == nil {
		return
	}
	if op != nil && op.Op != nil {
		span.SetAttributes(keyOpID.String(op.Op.ID), keyReplayed.Bool(op.Replayed))
	}
	if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		code, _ := r.Meta[contract.MetaCode].(string)
		span.SetAttributes(keyErrorType.String(cmp.Or(code, "tool_error")))
		span.SetStatus(codes.Error, cmp.Or(code, "tool_error"))
	}
	if err != nil {
		span.SetAttributes(keyErrorType.String("internal"))
		span.SetStatus(codes.Error, "internal")
	}
	span.End()
}

// toolSpan starts the span of a call sent upstream (a client span,
// "tools/call TOOL"), a child of ctx's (the served call's), and writes
// its context into meta, so that the upstream continues the trace.
// Without a tracer it changes nothing: meta's traceparent, if any, goes
// on as it came.
func (ps *proxied) toolSpan(ctx context.Context, tool, opID string, meta mcp.Meta) (context.Context, trace.Span, mcp.Meta) {
	tr := ps.p.opts.Tracer
	if tr == nil {
		return ctx, nil, meta
	}
	attrs := []attribute.KeyValue{attrMethod, attrOperation, keyTool.String(tool), keyServer.String(ps.cfg.Name)}
	if opID != "" {
		attrs = append(attrs, keyOpID.String(opID), keyReplayed.Bool(false))
	}
	ctx, span := tr.Start(ctx, "tools/call "+tool, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	out := mcp.Meta{}
	for k, v := range meta {
		out[k] = v
	}
	traceContext.Inject(ctx, metaCarrier(out))
	return ctx, span, out
}

// endToolSpan ends a tool call's span with what became of the call.
func endToolSpan(span trace.Span, res *mcp.CallToolResult, err error) {
	if span == nil {
		return
	}
	switch {
	case err != nil:
		span.SetAttributes(keyErrorType.String(errorType(err)))
		span.SetStatus(codes.Error, errorType(err))
	case res != nil && res.IsError:
		span.SetAttributes(keyErrorType.String("tool_error"))
		span.SetStatus(codes.Error, "tool_error")
	}
	span.End()
}

// errorType names an upstream failure without its message, which may
// quote the caller's data.
func errorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errNotSent):
		return "not_sent"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, errNoAnswer):
		return "no_answer"
	}
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		return "jsonrpc_error"
	}
	return "no_answer"
}
