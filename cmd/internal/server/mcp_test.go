package server_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
	"github.com/idemgate/idemgate/ledger"
)

// TestMCPToolsList: each guarded tool gains a required intent argument
// (_intent where the tool has its own intent), a read-only tool is listed
// as the server lists it, and the proxy adds operation_status.
func TestMCPToolsList(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		res, err := s.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		tools := map[string]map[string]any{}
		for _, tl := range res.Tools {
			b, _ := json.Marshal(tl.InputSchema)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			tools[tl.Name] = m
		}
		intentOf := func(name string) (string, bool) {
			props, _ := tools[name]["properties"].(map[string]any)
			req, _ := tools[name]["required"].([]any)
			for _, n := range []string{"_intent", "intent"} {
				if p, ok := props[n].(map[string]any); ok && p["maxLength"] == float64(128) && slices.Contains(req, any(n)) {
					if n == "intent" || props["intent"] != nil {
						return n, true
					}
				}
			}
			return "", false
		}
		if n, ok := intentOf("create_ticket"); !ok || n != "intent" {
			t.Errorf("create_ticket: %v", tools["create_ticket"])
		}
		if n, ok := intentOf("note"); !ok || n != "_intent" {
			t.Errorf("note, whose own argument is intent: %v", tools["note"])
		}
		if _, ok := intentOf("count_effects"); ok {
			t.Errorf("the read-only count_effects was given an intent: %v", tools["count_effects"])
		}
		if tools["operation_status"] == nil {
			t.Error("no operation_status")
		}
	})
}

// TestMCPReplayAndChangedArguments: a guarded call is forwarded once
// (without its intent), recorded as an operation of the caller's tenant
// with docs/design.md's key and fingerprint, replayed with its marks, and
// refused when the intent comes back with other arguments.
func TestMCPReplayAndChangedArguments(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		args := map[string]any{"intent": "ticket for order 42", "title": "refund order 42"}
		first := callTool(t, s, "create_ticket", args)
		opID, _ := first.Meta[contract.MetaOperation].(string)
		if first.IsError || opID == "" || structured(t, first)["id"] != "T-1" || first.Meta[contract.MetaReplayed] != nil {
			t.Fatalf("first call: %+v %s", first, textOf(first))
		}
		again := callTool(t, s, "create_ticket", args)
		if again.Meta[contract.MetaReplayed] != true || again.Meta[contract.MetaOperation] != opID ||
			structured(t, again)["id"] != "T-1" {
			t.Fatalf("the retry: %+v", again)
		}
		changed := callTool(t, s, "create_ticket", map[string]any{"intent": "ticket for order 42", "title": "other"})
		if !changed.IsError || codeOf(changed) != contract.CodeFingerprintMismatch || !strings.Contains(textOf(changed), "new intent") {
			t.Fatalf("changed arguments: %+v %s", changed, textOf(changed))
		}
		if n := e.effectCount(); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		op, err := e.store.GetByKey(context.Background(), intentKey("acme", "create_ticket", "agent", "ticket for order 42"))
		if err != nil {
			t.Fatal(err)
		}
		fp, _ := fingerprint.OfMCP("tickets", "create_ticket", "acme", map[string]any{"title": "refund order 42"})
		if op.ID != opID || op.State != ledger.Succeeded || op.Route != "mcp:tickets/create_ticket" || op.Fingerprint != fp {
			t.Fatalf("the operation: %+v", op)
		}
	})
}

// TestMCPPrincipalsAndTenants: the same intent name used by two
// principals of one tenant and by another tenant's is three actions.
func TestMCPPrincipalsAndTenants(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		args := map[string]any{"intent": "daily report", "title": "report"}
		for _, token := range []string{"agent-token", "alice-token", "globex-token", "agent-token"} {
			if res := callTool(t, e.session(token, "tickets", nil), "create_ticket", args); res.IsError {
				t.Fatalf("%s: %s", token, textOf(res))
			}
		}
		if n := e.effectCount(); n != 3 {
			t.Fatalf("%d effects, want 3: one per principal", n)
		}
		for _, k := range [][2]string{{"acme", "agent"}, {"acme", "alice"}, {"globex", "other"}} {
			if _, err := e.store.GetByKey(context.Background(), intentKey(k[0], "create_ticket", k[1], "daily report")); err != nil {
				t.Errorf("%v: %v", k, err)
			}
		}
	})
}
