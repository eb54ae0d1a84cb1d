package server_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/tracing"
)

// TestTracesOfAnMCPToolCall: with traces on, a guarded tool call sent
// upstream is a client span "tools/call TOOL" (MCP's and GenAI's
// conventions), a child of the agent's traceparent in _meta, holding the
// operation's id; the upstream reads that span's context in its _meta,
// so the trace goes on; and neither the intent, the arguments nor the
// key is in the exported bytes.
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
	res, err := e.session("agent-token", "tickets", nil).CallTool(context.Background(), &mcp.CallToolParams{Name: "trace",
		Arguments: map[string]any{"intent": "INTENT-MARKER-3b7", "x": "ARG-MARKER-c41"},
		Meta:      mcp.Meta{"traceparent": "00-" + agentTrace + "-" + agentSpan + "-01"}})
	if err != nil || res.IsError {
		t.Fatalf("trace: %v %+v", err, res)
	}
	op, err := e.store.GetByKey(context.Background(), intentKey("acme", "trace", "agent", "INTENT-MARKER-3b7"))
	if err != nil {
		t.Fatal(err)
	}
	if err := traces.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, secret := range []string{"INTENT-MARKER-3b7", "ARG-MARKER-c41", "agent-token"} {
		if bytes.Contains(rc.raw.Bytes(), []byte(secret)) {
			t.Errorf("the exported spans hold %q", secret)
		}
	}
	var call int
	for _, s := range rc.spans {
		if s.Name != "tools/call trace" {
			continue
		}
		call++
		a := attrs(s)
		if hex.EncodeToString(s.TraceId) != agentTrace || hex.EncodeToString(s.ParentSpanId) != agentSpan {
			t.Errorf("the tool call's span is not the agent's span's child: trace %x parent %x", s.TraceId, s.ParentSpanId)
		}
		if a["mcp.method.name"] != "tools/call" || a["gen_ai.operation.name"] != "execute_tool" ||
			a["gen_ai.tool.name"] != "trace" || a["idemgate.mcp.server"] != "tickets" || a["idemgate.operation.id"] != op.ID {
			t.Errorf("the tool call's attributes: %v", a)
		}
		want := "00-" + agentTrace + "-" + hex.EncodeToString(s.SpanId) + "-01"
		if got, _, _ := strings.Cut(textOf(res), " "); got != want {
			t.Errorf("the upstream read traceparent %q, want the tool call span's %q", got, want)
		}
	}
	if call != 1 {
		t.Errorf("%d tool call spans, want 1", call)
	}
}
