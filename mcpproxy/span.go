package mcpproxy

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The tool call's span follows OpenTelemetry's conventions for MCP and
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

// toolSpan starts the span of a call sent upstream, a child of the
// traceparent in the call's _meta when it has one (the agent's trace),
// else of ctx's (the MCP request's), and writes the span's own context
// into meta, so that the upstream continues the trace. Without a tracer
// it changes nothing: meta's traceparent, if any, goes on as it came.
func (ps *proxied) toolSpan(ctx context.Context, tool, opID string, meta mcp.Meta) (context.Context, trace.Span, mcp.Meta) {
	tr := ps.p.opts.Tracer
	if tr == nil {
		return ctx, nil, meta
	}
	if parent := traceContext.Extract(ctx, metaCarrier(meta)); trace.SpanContextFromContext(parent).IsValid() {
		ctx = parent
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
