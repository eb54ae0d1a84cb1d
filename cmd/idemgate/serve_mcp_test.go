package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/config"
)

// TestShutdownEndsIdleMCPStreams: a graceful stop with an MCP client
// connected and idle, its standalone event stream open, ends that stream
// instead of waiting for it: serve returns long before its
// shutdown_timeout of an hour (the stream never ends on its own).
func TestShutdownEndsIdleMCPStreams(t *testing.T) {
	t.Parallel()
	upstream := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	mcp.AddTool(upstream, &mcp.Tool{Name: "look", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
		})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return upstream }, nil))
	defer up.Close()
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "gw.yaml"), []byte(fmt.Sprintf(`store: sqlite:%s
listen: 127.0.0.1:0
shutdown_timeout: 1h
principals:
  - {name: agent, tenant: acme, roles: [agent], token_sha256: %s}
mcp_servers:
  - {name: look, url: %s}
`, filepath.Join(dir, "gw.db"), hashOf("agent-token"), up.URL)))
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serveInProcess(t, cfg)
	streaming := make(chan struct{}, 1)
	c := mcp.NewClient(&mcp.Implementation{Name: "idle-agent", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp/look",
		HTTPClient: &http.Client{Transport: streamWatch{streaming}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "look"}); err != nil {
		t.Fatal(err)
	}
	<-streaming // the standalone stream is open; the client now idles
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(time.Minute): // far below the shutdown_timeout: the stream held it
		t.Fatal("the shutdown waits for the idle client's event stream")
	}
}

// streamWatch is an MCP client's transport, with the agent's token, that
// says when the standalone event stream (a GET) is open.
type streamWatch struct{ open chan<- struct{} }

func (s streamWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer agent-token")
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.Method == http.MethodGet && resp.StatusCode == http.StatusOK {
		select {
		case s.open <- struct{}{}:
		default:
		}
	}
	return resp, err
}
