package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/agent"
	"github.com/idemgate/idemgate/mcpserver"
)

// gatewayStub answers /v1/tickets with 201, loses the answer of /v1/lost
// after reading it, and says the lost one is unknown when asked.
func gatewayStub(t *testing.T, sends *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer server-side-token" {
			w.WriteHeader(401)
			return
		}
		switch r.URL.Path {
		case "/_idem/v1/operations":
			fmt.Fprint(w, `{"id":"op_9","state":"unknown","history":[]}`)
		case "/v1/lost":
			sends.Add(1)
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
		default:
			sends.Add(1)
			w.Header().Set("Idempotency-Operation", "op_1")
			w.WriteHeader(201)
			fmt.Fprint(w, `{"id":"T-1"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func connect(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	j, err := agent.OpenJournal(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	c := &agent.Client{BaseURL: url, Token: "server-side-token", Journal: j, Policy: agent.Policy{MaxAttempts: 2}}
	st, ct := mcp.NewInMemoryTransports()
	if _, err := mcpserver.New(c, "test").Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-model", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and decodes its structured result.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (mcpserver.Result, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var out mcpserver.Result
	if !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	return out, res
}

func TestToolsAndSchemas(t *testing.T) {
	var sends atomic.Int32
	cs := connect(t, gatewayStub(t, &sends).URL)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 80 {
			t.Errorf("%s: a description the model can act on, please: %q", tool.Name, tool.Description)
		}
		in, _ := json.Marshal(tool.InputSchema)
		out, _ := json.Marshal(tool.OutputSchema)
		switch tool.Name {
		case "submit_write":
			for _, want := range []string{`"required":["method","path"]`, `"mode"`, `"intent"`, `"body"`} {
				if !strings.Contains(string(in), want) {
					t.Errorf("submit_write input schema lacks %s: %s", want, in)
				}
			}
			fallthrough
		case "operation_status":
			for _, field := range []string{"intent", "kind", "operation_id", "status", "body", "next_step"} {
				if !strings.Contains(string(out), `"`+field+`"`) {
					t.Errorf("%s output schema lacks %s: %s", tool.Name, field, out)
				}
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"list_operations", "operation_status", "submit_write"}) {
		t.Fatalf("tools %v", names)
	}
	if strings.Contains(fmt.Sprint(res), "server-side-token") {
		t.Fatal("the token reached the model")
	}
}

func TestSubmitStatusAndList(t *testing.T) {
	var sends atomic.Int32
	cs := connect(t, gatewayStub(t, &sends).URL)
	write := map[string]any{"method": "POST", "path": "/v1/tickets", "body": map[string]any{"title": "Disk full"}}

	// Without an intent: one is made, nothing is sent.
	first, _ := call(t, cs, "submit_write", write)
	if first.Kind != "intent_created" || !strings.HasPrefix(first.Intent, "intent-") ||
		!strings.Contains(first.NextStep, first.Intent) || sends.Load() != 0 {
		t.Fatalf("first call: %+v, %d sends", first, sends.Load())
	}
	// Asked again without it (the model forgot): the same intent, not a new key.
	again, _ := call(t, cs, "submit_write", write)
	if again.Intent != first.Intent || sends.Load() != 0 {
		t.Fatalf("the same request without an intent: %+v", again)
	}
	write["intent"] = first.Intent
	done, _ := call(t, cs, "submit_write", write)
	if done.Kind != "created" || done.Status != 201 || done.Body != `{"id":"T-1"}` || done.OperationID != "op_1" ||
		sends.Load() != 1 {
		t.Fatalf("second call: %+v", done)
	}

	// A changed payload under the intent: a tool error, nothing sent.
	write["body"] = map[string]any{"title": "Other"}
	if _, res := call(t, cs, "submit_write", write); !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]), "differs") {
		t.Fatalf("changed payload: %+v", res)
	}

	// The timeout path: the answer is lost, the gateway says unknown.
	lost, _ := call(t, cs, "submit_write", map[string]any{"intent": "task-9/charge", "method": "POST", "path": "/v1/lost"})
	if lost.Kind != "unknown" || !strings.Contains(lost.NextStep, "Do not retry") || sends.Load() != 2 {
		t.Fatalf("lost answer: %+v, %d sends", lost, sends.Load())
	}
	for _, args := range []map[string]any{{"intent": "task-9/charge"}, {"operation_id": "op_9"}} {
		st, _ := call(t, cs, "operation_status", args)
		if st.Kind != "unknown" || st.Intent != "task-9/charge" || !strings.Contains(st.Body, `"state":"unknown"`) {
			t.Fatalf("status %v: %+v", args, st)
		}
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_operations", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Intents []agent.Entry }
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &list)
	if len(list.Intents) != 1 || list.Intents[0].Intent != "task-9/charge" {
		t.Fatalf("pending: %s", b)
	}
}

func TestMalformedInputIsAnErrorResult(t *testing.T) {
	var sends atomic.Int32
	cs := connect(t, gatewayStub(t, &sends).URL)
	for _, args := range []map[string]any{
		{"method": 7, "path": "/v1/tickets"},
		{"intent": "x", "method": "POST"},
		{"intent": "x", "method": "POST", "path": "/v1/tickets", "mode": "again"},
		{"intent": "x", "method": "POST", "path": "no-slash"},
		{"intent": "x", "method": "POST", "path": "/v1/tickets", "body": "not json"},
		{"intent": "x", "method": "POST", "path": "/v1/tickets", "unknown": true},
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "submit_write", Arguments: args})
		if err != nil || !res.IsError {
			t.Errorf("%v: want an error result, got %+v %v", args, res, err)
		}
	}
	if _, res := call(t, cs, "operation_status", map[string]any{}); !res.IsError {
		t.Error("operation_status without an intent or id")
	}
	if sends.Load() != 0 {
		t.Fatalf("%d malformed writes were sent", sends.Load())
	}
	// A body sent pre-encoded as a string is taken as the JSON it holds.
	if st, _ := call(t, cs, "submit_write", map[string]any{"intent": "z", "method": "POST", "path": "/v1/t",
		"body": `{"a":1}`}); st.Kind != "created" {
		t.Fatalf("a JSON string body: %+v", st)
	}
	// The server is still there.
	if st, _ := call(t, cs, "submit_write", map[string]any{"intent": "y", "method": "POST", "path": "/v1/t"}); st.Kind != "created" {
		t.Fatalf("after bad input: %+v", st)
	}
}
