package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// TestMCPUpstreamDiesMidCall: a server that exits after its effect and
// before its answer leaves the call unknown, never re-sent; the proxy
// starts the server again, and the next call works.
func TestMCPUpstreamDiesMidCall(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		before := e.g.MCP().Started("tickets")
		died := callTool(t, s, "die", map[string]any{"intent": "doomed", "title": "x"})
		if codeOf(died) != contract.CodeOutcomeUnknown || !strings.Contains(textOf(died), "Do not retry") {
			t.Fatalf("a call whose server died: %+v %s", died, textOf(died))
		}
		op, err := e.store.GetByKey(context.Background(), intentKey("acme", "die", "agent", "doomed"))
		if err != nil || op.State != ledger.Unknown {
			t.Fatalf("the operation: %+v %v", op, err)
		}
		eventually(t, "the server is started again", func() bool { return e.g.MCP().Started("tickets") > before })
		again := callTool(t, s, "die", map[string]any{"intent": "doomed", "title": "x"})
		if codeOf(again) != contract.CodeOutcomeUnknown {
			t.Fatalf("the retry of an unknown call: %+v", again)
		}
		if n := e.effectCount(); n != 1 {
			t.Fatalf("%d effects, want 1: an unknown call is never re-sent", n)
		}
		if res := callTool(t, s, "create_ticket", map[string]any{"intent": "after", "title": "y"}); res.IsError {
			t.Fatalf("after the restart: %s", textOf(res))
		}
	})
}

// TestMCPClientGivesUpThenRetries: a client that stops waiting does not
// stop the call; its retry of the same intent gets the one result.
func TestMCPClientGivesUpThenRetries(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		args := map[string]any{"intent": "patient", "title": "t", "ms": 400}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "slow_ticket", Arguments: args})
		cancel()
		if err == nil {
			t.Fatal("the impatient call was answered")
		}
		var res *mcp.CallToolResult
		eventually(t, "the retry is answered with the result", func() bool {
			res = callTool(t, e.session("agent-token", "tickets", nil), "slow_ticket", args)
			return codeOf(res) != contract.CodeInProgress
		})
		if res.IsError || res.Meta[contract.MetaReplayed] != true {
			t.Fatalf("the retry: %+v %s", res, textOf(res))
		}
		if n := e.effectCount(); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// TestMCPFailures: a result with isError and a JSON-RPC error are both
// failed operations, answered again as they were, never re-sent.
func TestMCPFailures(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		for range 2 {
			res := callTool(t, s, "fail", map[string]any{"intent": "f", "title": "x"})
			if !res.IsError || textOf(res) != "refused" {
				t.Fatalf("isError: %+v", res)
			}
			_, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "rpc_error", Arguments: map[string]any{"intent": "r"}})
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) || werr.Code != -32010 {
				t.Fatalf("a JSON-RPC error: %v", err)
			}
		}
		for _, key := range []ledger.OpKey{intentKey("acme", "fail", "agent", "f"), intentKey("acme", "rpc_error", "agent", "r")} {
			if op, err := e.store.GetByKey(context.Background(), key); err != nil || op.State != ledger.Failed {
				t.Fatalf("%s: %+v %v", key, op, err)
			}
		}
	})
}

// TestMCPUnguardedAndMeta: a read-only tool is forwarded unrecorded and
// without an intent; traceparent in _meta reaches the server; a client's
// own key in _meta is the call's key.
func TestMCPUnguardedAndMeta(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		if res := callTool(t, s, "count_effects", map[string]any{}); res.IsError || res.Meta[contract.MetaOperation] != nil {
			t.Fatalf("count_effects: %+v %s", res, textOf(res))
		}
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "trace",
			Arguments: map[string]any{"intent": "t1", "x": 1}, Meta: mcp.Meta{"traceparent": tp}})
		if err != nil || textOf(res) != tp+` {"x":1}` {
			t.Fatalf("trace: %v %+v", err, res)
		}
		op, err := e.store.GetByKey(context.Background(), intentKey("acme", "trace", "agent", "t1"))
		if err != nil || op.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Fatalf("the traced operation: %+v %v", op, err)
		}
		keyed := &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"title": "k"},
			Meta: mcp.Meta{contract.MetaIdempotencyKey: "client-key-1"}}
		for range 2 {
			if res, err := s.CallTool(context.Background(), keyed); err != nil || res.IsError {
				t.Fatalf("a call with its own key: %v %+v", err, res)
			}
		}
		if _, err := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.MCPMetaNamespace("tickets"), Key: "client-key-1"}); err != nil || e.effectCount() != 1 {
			t.Fatalf("the client's key: %v, %d effects", err, e.effectCount())
		}
		// A client's key that is an intent's derived key neither claims
		// nor replays the intent's operation: another namespace.
		callTool(t, s, "create_ticket", map[string]any{"intent": "mine", "title": "m"})
		claim := &mcp.CallToolParams{Name: "create_ticket", Arguments: map[string]any{"title": "m"},
			Meta: mcp.Meta{contract.MetaIdempotencyKey: contract.MCPIntentKey("create_ticket", "agent", "mine")}}
		if res, err := s.CallTool(context.Background(), claim); err != nil || res.IsError ||
			res.Meta[contract.MetaReplayed] != nil || e.effectCount() != 3 {
			t.Fatalf("a client's key equal to an intent's: %v %+v, %d effects", err, res, e.effectCount())
		}
		intent, err := e.store.GetByKey(context.Background(), intentKey("acme", "create_ticket", "agent", "mine"))
		meta, merr := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme",
			Namespace: ledger.MCPMetaNamespace("tickets"), Key: intent.Key})
		if err != nil || merr != nil || intent.ID == meta.ID || intent.Kind != ledger.KindMCP || meta.Kind != ledger.KindMCP {
			t.Fatalf("the intent's %+v %v, the client's %+v %v", intent, err, meta, merr)
		}
	})
}

// TestMCPOperationStatus: operation_status says where an intent stands,
// and that one never received was never done.
func TestMCPOperationStatus(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		none := callTool(t, s, "operation_status", map[string]any{"tool": "create_ticket", "intent": "x"})
		if structured(t, none)["state"] != nil || !strings.Contains(textOf(none), "never received") {
			t.Fatalf("an intent never sent: %s", textOf(none))
		}
		callTool(t, s, "create_ticket", map[string]any{"intent": "x", "title": "t"})
		done := callTool(t, s, "operation_status", map[string]any{"tool": "create_ticket", "intent": "x"})
		if structured(t, done)["state"] != "succeeded" {
			t.Fatalf("a done intent: %s", textOf(done))
		}
		other := callTool(t, e.session("globex-token", "tickets", nil), "operation_status",
			map[string]any{"tool": "create_ticket", "intent": "x"})
		if structured(t, other)["state"] != nil {
			t.Fatalf("another tenant sees: %s", textOf(other))
		}
	})
}

// TestMCPBusinessKey: a tool's business key makes two intents for one
// source event one action: the second is answered with the first's
// result, nothing forwarded.
func TestMCPBusinessKey(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		first := callTool(t, s, "create_ticket", map[string]any{"intent": "alert 1", "title": "disk", "source_event_id": "ev-9"})
		second := callTool(t, s, "create_ticket", map[string]any{"intent": "alert 1 again", "title": "disk", "source_event_id": "ev-9"})
		if first.IsError || second.IsError || structured(t, second)["id"] != "T-1" || e.effectCount() != 1 {
			t.Fatalf("one source event, two intents: %+v %+v, %d effects", first, second, e.effectCount())
		}
	})
}

// TestMCPConcurrencyGroup: while one action of a tool's concurrency group
// runs, another intent of the same group is refused, nothing forwarded;
// once it ends, the other runs.
func TestMCPConcurrencyGroup(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		done := make(chan *mcp.CallToolResult, 1)
		first := e.session("agent-token", "tickets", nil)
		go func() {
			res, err := first.CallTool(context.Background(), &mcp.CallToolParams{Name: "slow_ticket",
				Arguments: map[string]any{"intent": "first", "title": "group", "ms": 800}})
			if err != nil {
				res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
			}
			done <- res
		}()
		s := e.session("agent-token", "tickets", nil)
		eventually(t, "the first holds the group", func() bool {
			op, err := e.store.GetByKey(context.Background(), intentKey("acme", "slow_ticket", "agent", "first"))
			return err == nil && op.State == ledger.Executing
		})
		locked := callTool(t, s, "slow_ticket", map[string]any{"intent": "second", "title": "group", "ms": 0})
		if codeOf(locked) != contract.CodeConcurrencyLocked {
			t.Fatalf("a second action of the group: %+v %s", locked, textOf(locked))
		}
		if first := <-done; first.IsError {
			t.Fatalf("the first: %s", textOf(first))
		}
		if res := callTool(t, s, "slow_ticket", map[string]any{"intent": "second", "title": "group", "ms": 0}); res.IsError {
			t.Fatalf("the second, after the first: %s", textOf(res))
		}
		if n := e.effectCount(); n != 2 {
			t.Fatalf("%d effects, want 2", n)
		}
	})
}
