package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
)

// TestMCPAnswersJSON: the proxy answers a tools/call with one
// application/json body, not an SSE stream, to a client that accepts
// both (the cheaper answer; docs/design.md, "MCP proxy"), and the body is
// the whole answer: the call made once, its retry replayed from it.
func TestMCPAnswersJSON(t *testing.T) {
	t.Parallel()
	forEachMCPStore(t, func(t *testing.T, e *mcpEnv) {
		s := e.session("agent-token", "tickets", nil)
		headers := []string{"Accept", "application/json, text/event-stream", "Mcp-Session-Id", s.ID(),
			"Mcp-Protocol-Version", s.InitializeResult().ProtocolVersion}
		call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_ticket",` +
			`"arguments":{"intent":"json-1","title":"t"}}}`
		for i, replayed := range []bool{false, true} {
			r := e.do("POST", "/mcp/tickets", "agent-token", call, headers...)
			if ct := r.header.Get("Content-Type"); r.status != 200 || !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("call %d: %d %q %s, want 200 application/json", i, r.status, ct, r.body)
			}
			var msg struct {
				ID     int `json:"id"`
				Result struct {
					IsError bool           `json:"isError"`
					Meta    map[string]any `json:"_meta"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(r.body), &msg); err != nil || msg.ID != 7 || msg.Result.IsError {
				t.Fatalf("call %d: %v %s", i, err, r.body)
			}
			if got := msg.Result.Meta[contract.MetaReplayed] == true; got != replayed {
				t.Fatalf("call %d: replayed %v, want %v: %s", i, got, replayed, r.body)
			}
		}
		if n := e.effectCount(); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// TestMCPUpstreamConnectionsKept: calls in flight together to a
// Streamable HTTP server each take a connection, and the proxy keeps them
// for the next calls rather than dialling again (the default transport
// keeps 2): three rounds of 16 overlapping calls do not dial each
// round's connections anew.
func TestMCPUpstreamConnectionsKept(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		effects := filepath.Join(t.TempDir(), "http-effects.jsonl")
		addr, dialled := countingForwarder(t, startHTTPCounter(t, effects, ""))
		e := newMCPEnv(t, db, fmt.Sprintf("  - {name: remote, url: 'http://%s/mcp'}\n", addr))
		e.effects = effects
		const c = 16
		sessions := make([]*mcp.ClientSession, c)
		for i := range sessions {
			sessions[i] = e.session("agent-token", "remote", nil)
		}
		for round := range 3 {
			var wg sync.WaitGroup
			for i, s := range sessions {
				wg.Go(func() {
					args := map[string]any{"intent": fmt.Sprintf("r%d-%d", round, i), "title": "t", "ms": 100}
					if res := callTool(t, s, "slow_ticket", args); res.IsError {
						t.Errorf("call: %s", textOf(res))
					}
				})
			}
			wg.Wait()
		}
		if n := e.effectCount(); n != 3*c {
			t.Fatalf("%d effects, want %d", n, 3*c)
		}
		// Kept, the rounds after the first dial only when a connection is
		// not back in the pool yet (about 20–30 in all); dropped, each
		// round dials c-2 anew (44).
		if n := dialled.Load(); n > 2*c {
			t.Fatalf("%d connections to the server for 3 rounds of %d calls: not kept", n, c)
		}
	})
}

// countingForwarder forwards TCP connections to addr, counting them.
func countingForwarder(t *testing.T, addr string) (string, *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			out, err := net.Dial("tcp", addr)
			if err != nil {
				_ = in.Close()
				continue
			}
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
	return ln.Addr().String(), &n
}
