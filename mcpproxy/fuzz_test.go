package mcpproxy

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// FuzzReadCall: whatever a client sends as a guarded call's arguments and
// _meta, the proxy either refuses it with a code, or takes a key the
// ledger holds and arguments that are a JSON object without the intent.
func FuzzReadCall(f *testing.F) {
	f.Add([]byte(`{"intent":"a","title":"t"}`), "")
	f.Add([]byte(`{"title":"t"}`), "client-key")
	f.Add([]byte(`[1]`), "")
	f.Add([]byte(`{"intent":"\u00e9"}`), "")
	f.Add([]byte(`{"intent":7}`), "")
	f.Add([]byte(`null`), "\x00")
	ps := &proxied{cfg: Server{Name: "tickets"}}
	t := &tool{name: "create_ticket", intent: "intent", guarded: true, policy: keyed.Policy{Name: "mcp:tickets/create_ticket"}}
	pr := approval.Principal{Name: "agent", Tenant: "acme"}
	f.Fuzz(func(tt *testing.T, args []byte, metaKey string) {
		req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: t.name, Arguments: args}}
		if metaKey != "" {
			req.Params.Meta = mcp.Meta{contract.MetaIdempotencyKey: metaKey}
		}
		c, refused := ps.readCall(t, pr, req)
		if refused != nil {
			if !refused.IsError || refused.Meta[contract.MetaCode] == "" {
				tt.Fatalf("a refusal without its code: %+v", refused)
			}
			return
		}
		if c.cmd.Key == "" || len(c.cmd.Key) > ledger.MaxKeyLen || c.cmd.Namespace == "" {
			tt.Fatalf("key %q in %q", c.cmd.Key, c.cmd.Namespace)
		}
		var obj map[string]any
		if err := json.Unmarshal(c.args, &obj); err != nil || obj == nil {
			tt.Fatalf("forwarded arguments %q: %v", c.args, err)
		}
		if _, ok := obj["intent"]; ok {
			tt.Fatalf("the intent is forwarded: %s", c.args)
		}
	})
}

// FuzzWithIntent: any input schema a server lists gets a required intent
// argument, or is left out with an error; never a panic.
func FuzzWithIntent(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`))
	f.Add([]byte(`{"type":"object","properties":{"intent":{"type":"string"}}}`))
	f.Add([]byte(`{"properties":5,"required":"x"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, name, err := withIntent(raw)
		if err != nil {
			return
		}
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		if props[name] == nil || len(req) == 0 || req[len(req)-1] != name {
			t.Fatalf("%s: intent %q not required: %v", raw, name, s)
		}
	})
}
