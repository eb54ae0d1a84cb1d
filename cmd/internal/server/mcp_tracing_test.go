package server_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/tracing"
)

// TestTracesOfAnMCPToolCall: with traces on, one tool call is one trace.
// The proxy serves it in a server span "tools/call TOOL" (MCP's and
// GenAI's conventions) holding the operation's id; its ledger steps and
// the call sent upstream (a client span of the same name) are its
// children, and the upstream reads the client span's context in its
// _meta, so the trace goes on. The served span's parent is the agent's
// traceparent in _meta; else the POST that carried the call (its
// listener span, a child of the client's traceparent header); never the
// session's initialize request, which ended before. Neither the intent,
// the arguments nor the key is in the exported bytes.
func TestTracesOfAnMCPToolCall(t *testing.T) {
	rc := newReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.srv.URL)
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	traces, err := tracing.FromEnv(context.Background(), "test")
	if err != nil || traces == nil {
		t.Fatalf("tracing on: %v %v", traces, err)
	}
	db := dbtest.SQLiteDB(t)
	effects := filepath.Join(t.TempDir(), "effects.jsonl")
	e := &mcpEnv{env: newEnvWith(t, db.Open(t), db.DSN,
		fmt.Sprintf(mcpServersTemplate, counterBinary(t), effects, ""), nil, server.WithTracing(traces)), effects: effects}
	t.Cleanup(e.g.Close)
	const agentTrace, agentSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const headerTrace, headerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	s := e.session("agent-token", "tickets", nil)
	byMeta := callTrace(t, s, "META-MARKER-1", mcp.Meta{"traceparent": "00-" + agentTrace + "-" + agentSpan + "-01"})
	byNothing := callTrace(t, s, "PLAIN-MARKER-2", nil)
	c := mcp.NewClient(&mcp.Implementation{Name: "traced-agent", Version: "1"}, nil)
	hs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.gw.URL + contract.MCPPath + "/tickets",
		HTTPClient: &http.Client{Transport: withTraceparent{"00-" + headerTrace + "-" + headerSpan + "-01"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	byHeader := callTrace(t, hs, "HEADER-MARKER-3", nil)
	if err := traces.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, secret := range []string{"META-MARKER-1", "PLAIN-MARKER-2", "HEADER-MARKER-3", "ARG-MARKER-c41", "agent-token"} {
		if bytes.Contains(rc.raw.Bytes(), []byte(secret)) {
			t.Errorf("the exported spans hold %q", secret)
		}
	}
	sp := spansOf(rc.spans)
	served := sp.served(t, e, "META-MARKER-1", byMeta)
	if hex.EncodeToString(served.TraceId) != agentTrace || hex.EncodeToString(served.ParentSpanId) != agentSpan {
		t.Errorf("with _meta's traceparent, the call's span is not the agent's span's child: trace %x parent %x",
			served.TraceId, served.ParentSpanId)
	}
	served = sp.served(t, e, "PLAIN-MARKER-2", byNothing)
	sp.inItsRequest(t, served, "")
	served = sp.served(t, e, "HEADER-MARKER-3", byHeader)
	if hex.EncodeToString(served.TraceId) != headerTrace {
		t.Errorf("with a traceparent header, the call's span is in trace %x, want the header's", served.TraceId)
	}
	sp.inItsRequest(t, served, headerSpan)
}

// callTrace calls the tool trace, which answers the traceparent it read.
func callTrace(t *testing.T, s *mcp.ClientSession, intent string, meta mcp.Meta) string {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "trace",
		Arguments: map[string]any{"intent": intent, "x": "ARG-MARKER-c41"}, Meta: meta})
	if err != nil || res.IsError {
		t.Fatalf("trace: %v %+v", err, res)
	}
	tp, _, _ := strings.Cut(textOf(res), " ")
	return tp
}

// withTraceparent is an MCP client's transport, with the agent's token,
// sending a traceparent header on every request.
type withTraceparent struct{ traceparent string }

func (w withTraceparent) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer agent-token")
	r.Header.Set("traceparent", w.traceparent)
	return http.DefaultTransport.RoundTrip(r)
}

// spans are the exported spans, by id.
type spans map[string]*tracepb.Span

func spansOf(all []*tracepb.Span) spans {
	out := spans{}
	for _, s := range all {
		out[hex.EncodeToString(s.SpanId)] = s
	}
	return out
}

// served is the server span of the call of intent, checked: it holds
// its operation's id, every ledger step of that operation is its child,
// and so is the one client span sent upstream, whose context the
// upstream read (upstreamRead).
func (sp spans) served(t *testing.T, e *mcpEnv, intent, upstreamRead string) *tracepb.Span {
	t.Helper()
	op, err := e.store.GetByKey(context.Background(), intentKey("acme", "trace", "agent", intent))
	if err != nil {
		t.Fatal(err)
	}
	var served *tracepb.Span
	for _, s := range sp {
		if s.Name == "tools/call trace" && s.Kind == tracepb.Span_SPAN_KIND_SERVER && attrs(s)["idemgate.operation.id"] == op.ID {
			served = s
		}
	}
	if served == nil {
		t.Fatalf("%s: no server span tools/call trace of operation %s", intent, op.ID)
	}
	a := attrs(served)
	if a["mcp.method.name"] != "tools/call" || a["gen_ai.operation.name"] != "execute_tool" ||
		a["gen_ai.tool.name"] != "trace" || a["idemgate.mcp.server"] != "tickets" || a["idemgate.replayed"] != "false" {
		t.Errorf("%s: the served call's attributes: %v", intent, a)
	}
	steps, clients := 0, 0
	for _, s := range sp {
		switch {
		case strings.HasPrefix(s.Name, "ledger.") && attrs(s)["idemgate.operation.id"] == op.ID:
			steps++
			if !bytes.Equal(s.ParentSpanId, served.SpanId) || !bytes.Equal(s.TraceId, served.TraceId) {
				t.Errorf("%s: the ledger step %s is not the served call's child: trace %x parent %x", intent, s.Name,
					s.TraceId, s.ParentSpanId)
			}
		case s.Name == "tools/call trace" && s.Kind == tracepb.Span_SPAN_KIND_CLIENT && bytes.Equal(s.ParentSpanId, served.SpanId):
			clients++
			if want := "00-" + hex.EncodeToString(s.TraceId) + "-" + hex.EncodeToString(s.SpanId) + "-01"; upstreamRead != want {
				t.Errorf("%s: the upstream read traceparent %q, want the client span's %q", intent, upstreamRead, want)
			}
		}
	}
	if steps < 2 || clients != 1 {
		t.Errorf("%s: %d ledger steps and %d client spans under the served call, want 2 or more and 1", intent, steps, clients)
	}
	return served
}

// inItsRequest checks that a served call's parent is the listener's span
// of the POST that carried it: a span that began before it and ended
// after it (the session's initialize ended long before), whose own
// parent is want (the client's header; "" for none).
func (sp spans) inItsRequest(t *testing.T, served *tracepb.Span, want string) {
	t.Helper()
	req := sp[hex.EncodeToString(served.ParentSpanId)]
	switch {
	case req == nil:
		t.Errorf("the served call's parent %x was not exported", served.ParentSpanId)
	case req.Kind != tracepb.Span_SPAN_KIND_SERVER || req.StartTimeUnixNano > served.StartTimeUnixNano ||
		req.EndTimeUnixNano < served.EndTimeUnixNano:
		t.Errorf("the served call's parent %s (%v) is not the request that carried it", req.Name, req.Kind)
	case hex.EncodeToString(req.ParentSpanId) != want:
		t.Errorf("the request's span has parent %x, want %q", req.ParentSpanId, want)
	}
}
