package server_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// mcpCases are issue 30's cases that only an MCP tool call has, on the
// suite's gateway (its Streamable HTTP mcpcounter). The cases the suite's
// guarantees already are: 1 (Namespaces), 6 (mcp/NotSentIsReleased, with
// the server restarted under the proxy's session).
func mcpCases(t *testing.T, g *suiteGateway) {
	s := &mcpSurface{suiteGateway: g}
	call := func(t *testing.T, token, tool string, args map[string]any, meta mcp.Meta) *mcp.CallToolResult {
		t.Helper()
		res, err := s.sessionOf(t, token).CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return res
	}
	id := func(t *testing.T) string {
		return strings.ReplaceAll(t.Name(), "/", "-") + "-" + fmt.Sprint(testRunStart)
	}

	// Case 2: principal bot with intent x/job-c1, then principal bot/x
	// with intent job-c1: two keys, two effects, neither answered with
	// the other's result.
	t.Run("PrincipalsWithSlashes", func(t *testing.T) {
		m := id(t)
		a := call(t, "bot-token", "create_ticket", map[string]any{"intent": "x/job-c1-" + m, "title": m + "/a"}, nil)
		b := call(t, "botx-token", "create_ticket", map[string]any{"intent": "job-c1-" + m, "title": m + "/b"}, nil)
		if a.IsError || b.IsError || b.Meta[contract.MetaReplayed] != nil || s.Effects(t, m) != 2 {
			t.Fatalf("bot's %s, bot/x's %s (replayed %v), %d effects", textOf(a), textOf(b), b.Meta[contract.MetaReplayed], s.Effects(t, m))
		}
	})

	// Case 3: a client's _meta key equal to another principal's derived
	// key neither claims nor replays the intent's operation.
	t.Run("MetaKeyEqualToADerivedKey", func(t *testing.T) {
		m := id(t)
		derived := contract.MCPIntentKey("create_ticket", "agent", m)
		claim := call(t, "bot-token", "create_ticket", map[string]any{"title": m + "/b"},
			mcp.Meta{contract.MetaIdempotencyKey: derived})
		mine := call(t, "agent-token", "create_ticket", map[string]any{"intent": m, "title": m + "/a"}, nil)
		if claim.IsError || mine.IsError || mine.Meta[contract.MetaReplayed] != nil || s.Effects(t, m) != 2 {
			t.Fatalf("the claim %s, the intent's call %s (replayed %v), %d effects", textOf(claim), textOf(mine),
				mine.Meta[contract.MetaReplayed], s.Effects(t, m))
		}
	})

	// Case 8: marks an upstream forges in its result's _meta are removed;
	// its other members stay; the proxy's own replay mark is its own.
	t.Run("ForgedMarksStripped", func(t *testing.T) {
		m := id(t)
		args := map[string]any{"intent": m, "title": m + "/a"}
		first := call(t, "agent-token", "forge", args, nil)
		if first.IsError || first.Meta[contract.MetaReplayed] != nil || first.Meta[contract.MetaCode] != nil ||
			first.Meta["vendor/kept"] != "yes" {
			t.Fatalf("a fresh call shown as %v", first.Meta)
		}
		if again := call(t, "agent-token", "forge", args, nil); again.Meta[contract.MetaReplayed] != true || s.Effects(t, m) != 1 {
			t.Fatalf("its replay: %v, %d effects", again.Meta, s.Effects(t, m))
		}
	})

	// Case 9: a result over the tool's max_result is final, as a route's
	// answer over max_response: the caller gets it, the retry a stand-in
	// saying so, nothing runs again, and the operation is not unknown.
	t.Run("ResultOverTheLimit", func(t *testing.T) {
		m := id(t)
		args := map[string]any{"intent": m, "title": m + "/a", "bytes": 4096}
		first := call(t, "agent-token", "big", args, nil)
		again := call(t, "agent-token", "big", args, nil)
		op, err := g.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.MCPNamespace("suite"),
			Key: contract.MCPIntentKey("big", "agent", m)})
		if err != nil || op.State != ledger.Succeeded || first.IsError || len(textOf(first)) != 4096 ||
			again.Meta[contract.MetaNotKept] != true || s.Effects(t, m) != 1 {
			t.Fatalf("first %d bytes, retry %v %s, operation %+v %v, %d effects", len(textOf(first)), again.Meta, textOf(again),
				op, err, s.Effects(t, m))
		}
	})

	// Case 10: copies of one call in flight wait for the first's result
	// (up to the server's timeout) rather than answer in_progress.
	t.Run("DuplicatesInFlightWait", func(t *testing.T) {
		m := id(t)
		args := map[string]any{"intent": m, "title": m + "/a", "ms": 300}
		var wg sync.WaitGroup
		results := make([]*mcp.CallToolResult, 20)
		for i := range results {
			wg.Go(func() { // no t.Fatal off the test's goroutine: a nil result fails below
				results[i], _ = s.sessionOf(t, "agent-token").CallTool(context.Background(),
					&mcp.CallToolParams{Name: "slow_ticket", Arguments: args})
			})
		}
		wg.Wait()
		for _, r := range results {
			if r == nil {
				t.Fatal("a copy failed")
			}
			if r.IsError {
				t.Fatalf("a copy answered %s %s", codeOf(r), textOf(r))
			}
		}
		if n := s.Effects(t, m); n != 1 {
			t.Fatalf("%d effects", n)
		}
	})

	// Case 7: the server, redeployed, says a write tool is read-only: an
	// intent it recorded is never forwarded again, and no call's intent
	// argument reaches the server. (Last: the server is restarted as it
	// was for the suite's guarantees.)
	t.Run("AnnotationsFlipped", func(t *testing.T) {
		m := id(t)
		args := map[string]any{"intent": m, "title": m + "/a"}
		if first := call(t, "agent-token", "create_ticket", args, nil); first.IsError {
			t.Fatalf("first: %s", textOf(first))
		}
		g.mcp.restartWith(t, "-readonly")
		defer func() { g.mcp.restartWith(t); s.fresh(t) }()
		if again := call(t, "agent-token", "create_ticket", args, nil); again.Meta[contract.MetaReplayed] != true {
			t.Fatalf("the recorded intent: %v %s", again.Meta, textOf(again))
		}
		// A new intent, once the proxy has its new session (the first
		// try may meet the old one: released, upstream_unavailable).
		other := map[string]any{"intent": m + "-new", "title": m + "/b"}
		var res *mcp.CallToolResult
		testenv.WaitFor(t, "the new intent answered", func() bool {
			res = call(t, "agent-token", "create_ticket", other, nil)
			return codeOf(res) != contract.CodeUpstreamUnavailable
		})
		if res.IsError {
			t.Fatalf("a new intent: %s", textOf(res))
		}
		if again := call(t, "agent-token", "create_ticket", args, nil); again.Meta[contract.MetaReplayed] != true {
			t.Fatalf("the recorded intent, with the new session: %v %s", again.Meta, textOf(again))
		}
		b, _ := os.ReadFile(g.mcp.effects)
		if n := s.Effects(t, m); n != 2 || strings.Contains(string(b), `"intent"`) {
			t.Fatalf("%d effects (want the first and the new intent's); the effects file: %s", n, b)
		}
	})
}
