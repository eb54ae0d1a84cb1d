package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
)

// writtenTools are an upstream's tools as it writes them: with what the
// Go SDK's Tool does not know (execution), and without the hints it
// always writes (idempotentHint).
const writtenTools = `[
 {"name":"look","title":"Look","description":"Read a thing.","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}},
  "annotations":{"readOnlyHint":true},"execution":{"taskSupport":"optional"},"_meta":{"example.com/x":1}},
 {"name":"write","inputSchema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},
  "annotations":{"destructiveHint":false},"execution":{"taskSupport":"forbidden"}}]`

// rawMCPServer is a Streamable HTTP MCP server written by hand, as a
// server in another language would write its tools; it answers
// tools/list as an event stream.
func rawMCPServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &msg)
		w.Header().Set("Mcp-Session-Id", "raw-1")
		switch msg.Method {
		case "initialize":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},`+
				`"serverInfo":{"name":"raw","version":"1"}}}`, msg.ID)
		case "tools/list":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"tools\":%s}}\n\n", msg.ID,
				strings.Join(strings.Fields(writtenTools), " "))
		case "ping":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, msg.ID)
		default:
			if len(msg.ID) == 0 { // a notification
				w.WriteHeader(http.StatusAccepted)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, msg.ID)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestMCPToolDefinitionsKept: tools/list gives each upstream tool as its
// server wrote it (execution, _meta and annotations untouched, no hint
// added); a guarded tool differs only by the intent argument in its
// inputSchema.
func TestMCPToolDefinitionsKept(t *testing.T) {
	db := dbtest.SQLiteDB(t)
	e := &mcpEnv{env: newEnv(t, db.Open(t), db.DSN, "mcp_servers:\n  - {name: raw, url: "+rawMCPServer(t).URL+"}\n")}
	t.Cleanup(e.g.Close)
	s := e.session("agent-token", "raw", nil)
	r := e.do("POST", contract.MCPPath+"/raw", "agent-token", `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`,
		"Accept", "application/json, text/event-stream", "Content-Type", "application/json", "Mcp-Session-Id", s.ID(),
		"Mcp-Protocol-Version", s.InitializeResult().ProtocolVersion)
	var listed struct {
		Result struct{ Tools []map[string]any } `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.body), &listed); err != nil || r.status != 200 {
		t.Fatalf("tools/list: %d %s", r.status, r.body)
	}
	var written []map[string]any
	_ = json.Unmarshal([]byte(writtenTools), &written)
	got := map[string]map[string]any{}
	for _, tool := range listed.Result.Tools {
		got[tool["name"].(string)] = tool
	}
	if !reflect.DeepEqual(got["look"], written[0]) {
		t.Errorf("the read-only tool, listed:\n%v\nwritten:\n%v", got["look"], written[0])
	}
	write := got["write"]
	schema, _ := write["inputSchema"].(map[string]any)
	props, _ := schema["properties"].(map[string]any)
	if props["intent"] == nil || props["a"] == nil || fmt.Sprint(schema["required"]) != "[a intent]" {
		t.Errorf("the guarded tool's schema: %v", schema)
	}
	delete(write, "inputSchema")
	delete(written[1], "inputSchema")
	if !reflect.DeepEqual(write, written[1]) {
		t.Errorf("the guarded tool, listed:\n%v\nwritten:\n%v", write, written[1])
	}
}
