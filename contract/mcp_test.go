package contract

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// decodeIntentKey reads an unhashed MCPIntentKey back into its triple.
func decodeIntentKey(key string) (tool, principal, intent string, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 {
		return "", "", "", false
	}
	unesc := strings.NewReplacer("%2F", "/", "%25", "%")
	return unesc.Replace(parts[0]), unesc.Replace(parts[1]), unesc.Replace(parts[2]), true
}

// TestMCPIntentKey: the key names one (tool, principal, intent) only,
// where the old mcp/<server>/<tool>/<principal>/<intent> named several;
// past ledger.MaxKeyLen it is a digest, still one per triple.
func TestMCPIntentKey(t *testing.T) {
	for _, c := range []struct{ tool, principal, intent, want string }{
		{"create_ticket", "bot", "ticket for order 42", "create_ticket/bot/ticket for order 42"},
		{"create_ticket", "bot", "x/job-c1", "create_ticket/bot/x%2Fjob-c1"},
		{"create_ticket", "bot/x", "job-c1", "create_ticket/bot%2Fx/job-c1"},
		{"deploy", "spiffe://ia/billing", "worker/run-1", "deploy/spiffe:%2F%2Fia%2Fbilling/worker%2Frun-1"},
		{"deploy", "spiffe://ia/billing/worker", "run-1", "deploy/spiffe:%2F%2Fia%2Fbilling%2Fworker/run-1"},
		{"a%2Fb", "p", "i", "a%252Fb/p/i"},
		{"a/b", "p", "i", "a%2Fb/p/i"},
	} {
		got := MCPIntentKey(c.tool, c.principal, c.intent)
		if got != c.want {
			t.Errorf("MCPIntentKey(%q, %q, %q) = %q, want %q", c.tool, c.principal, c.intent, got, c.want)
		}
		if tool, pr, in, ok := decodeIntentKey(got); !ok || tool != c.tool || pr != c.principal || in != c.intent {
			t.Errorf("%q decodes to %q %q %q %v", got, tool, pr, in, ok)
		}
	}
	long := strings.Repeat("i", 128)
	a := MCPIntentKey("tool", "jwt:"+strings.Repeat("p", 120), long)
	b := MCPIntentKey("tool", "jwt:"+strings.Repeat("p", 121), long)
	if !strings.HasPrefix(a, "sha256:") || len(a) != 7+64 || a == b {
		t.Fatalf("long keys: %q %q", a, b)
	}
	if k := MCPIntentKey("t", strings.Repeat("p", 124), strings.Repeat("i", 128)); len(k) != ledger.MaxKeyLen ||
		strings.HasPrefix(k, "sha256:") {
		t.Fatalf("a key of exactly %d bytes is kept as it is: %q", ledger.MaxKeyLen, k)
	}
}

// FuzzMCPIntentKey: an unhashed key decodes to its own triple, and two
// different triples never give one key.
func FuzzMCPIntentKey(f *testing.F) {
	f.Add("t", "bot", "x/job-c1", "t", "bot/x", "job-c1")
	f.Add("deploy", "spiffe://ia/billing", "worker/1", "deploy", "spiffe://ia/billing/worker", "1")
	f.Add("a%2F", "b", "c", "a/", "b", "c")
	f.Add("t", strings.Repeat("p", 200), "i", "t", strings.Repeat("p", 201), "i")
	f.Fuzz(func(t *testing.T, tool1, pr1, in1, tool2, pr2, in2 string) {
		k1, k2 := MCPIntentKey(tool1, pr1, in1), MCPIntentKey(tool2, pr2, in2)
		same := tool1 == tool2 && pr1 == pr2 && in1 == in2
		if (k1 == k2) != same {
			t.Fatalf("(%q, %q, %q) and (%q, %q, %q) give %q and %q", tool1, pr1, in1, tool2, pr2, in2, k1, k2)
		}
		if long := len(mcpKeyEsc.Replace(tool1)+mcpKeyEsc.Replace(pr1)+mcpKeyEsc.Replace(in1))+2 > ledger.MaxKeyLen; long {
			if !strings.HasPrefix(k1, "sha256:") || len(k1) != 7+64 {
				t.Fatalf("a key over %d bytes is %q", ledger.MaxKeyLen, k1)
			}
			return
		}
		if tool, pr, in, ok := decodeIntentKey(k1); !ok || tool != tool1 || pr != pr1 || in != in1 || len(k1) > ledger.MaxKeyLen {
			t.Fatalf("%q decodes to %q %q %q %v, want %q %q %q", k1, tool, pr, in, ok, tool1, pr1, in1)
		}
	})
}
