package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPOverStdio starts `idemgate mcp` as a child process, as an MCP
// client would, and performs a write through the real gateway with it.
func TestMCPOverStdio(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	cmd := exec.Command(binary, "mcp", "--journal", filepath.Join(d.dir, "journal.db"))
	cmd.Env = append(os.Environ(), "IDEMGATE_TOKEN="+token, "IDEMGATE_URL="+d.gw.URL, "IDEMGATE_AGENT_SECRET="+agentSecret)
	cmd.Stderr = os.Stderr
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "drill-model", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 3 {
		t.Fatalf("tools: %v %v", tools, err)
	}
	submit := func(args map[string]any) map[string]any {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "submit_write", Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("submit_write %v: %v %+v", args, err, res)
		}
		var out map[string]any
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		return out
	}
	var body map[string]any
	json.Unmarshal([]byte(ticket("", "Filed by a model")), &body)
	args := map[string]any{"method": "POST", "path": "/v1/tickets", "body": body}
	args["intent"] = submit(args)["intent"]
	for _, want := range []string{"created", "replayed"} {
		if out := submit(args); out["kind"] != want || out["status"] != 201.0 {
			t.Fatalf("want %s: %v", want, out)
		}
	}
	d.wantEffects("tickets_created", 1)
}
