// Command mcpcounter is the reference MCP server of idemgate's MCP proxy
// tests, drills and benchmarks: its write tools append each effect they
// make to a file, so that a test counts effects, not answers, across the
// server's restarts, and count_effects (read-only) says how many there
// are. It serves stdio by default, or Streamable HTTP with -http, where a
// bearer token (-token) is required.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	effects := flag.String("effects", os.Getenv("MCPCOUNTER_EFFECTS"), "the file effects are appended to")
	addr := flag.String("http", "", "serve Streamable HTTP at this address (/mcp) instead of stdio")
	token := flag.String("token", "", "with -http, the bearer token required")
	readOnly := flag.Bool("readonly", false, "annotate create_ticket read-only (a server that flips its annotations)")
	jsonAnswers := flag.Bool("json", false, "with -http, answer each call with one application/json body, not a stream")
	flag.Parse()
	if *effects == "" {
		log.Fatal("mcpcounter: -effects FILE (or MCPCOUNTER_EFFECTS) is required")
	}
	l := &ledger{path: *effects}
	srv := newServer(l, *readOnly)
	if *addr == "" {
		if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
		return
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening", ln.Addr())
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{JSONResponse: *jsonAnswers})
	log.Fatal(http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if *token != "" && r.Header.Get("Authorization") != "Bearer "+*token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && bigAnswer(w, r, l, *jsonAnswers) {
			return
		}
		h.ServeHTTP(w, r)
	})))
}

// bigAnswer answers a call of big asking for more than 1 MiB itself, as
// the server of a large export would: its effect made, the answer written
// as it is made, never whole in memory, and no more of it once the client
// stops reading. Anything else is left to the SDK (false).
func bigAnswer(w http.ResponseWriter, r *http.Request, l *ledger, jsonAnswer bool) bool {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string `json:"name"`
			Arguments big    `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" || msg.Params.Name != "big" ||
		msg.Params.Arguments.Bytes <= 1<<20 {
		return false
	}
	if _, err := l.effect("big", msg.Params.Arguments); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return true
	}
	head, tail := `{"jsonrpc":"2.0","id":`+string(msg.ID)+`,"result":{"content":[{"type":"text","text":"`, `"}]}}`
	if jsonAnswer {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "text/event-stream")
		head, tail = "event: message\ndata: "+head, tail+"\n\n"
	}
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	if _, err := io.WriteString(w, head); err != nil {
		return true
	}
	for left := msg.Params.Arguments.Bytes; left > 0; left -= len(chunk) {
		if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
			return true // the client stopped reading
		}
	}
	_, _ = io.WriteString(w, tail)
	return true
}

// ledger is the effects file.
type ledger struct {
	mu   sync.Mutex
	path string
}

// effect appends one effect and returns how many there are now.
func (l *ledger) effect(tool string, args any) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line, _ := json.Marshal(map[string]any{"tool": tool, "args": args})
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, err
	}
	f.Close()
	return l.countLocked()
}

func (l *ledger) count() (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.countLocked()
}

func (l *ledger) countLocked() (int, error) {
	b, err := os.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	return strings.Count(string(b), "\n"), err
}

type ticket struct {
	Title         string `json:"title"`
	SourceEventID string `json:"source_event_id,omitempty"`
}

type slow struct {
	Title string `json:"title"`
	MS    int    `json:"ms"`
}

type deploy struct {
	Environment string `json:"environment"`
	Artifact    string `json:"artifact"`
}

type note struct {
	Intent string `json:"intent"`
	Text   string `json:"text"`
}

type created struct {
	ID    string `json:"id"`
	Count int    `json:"count"`
}

type none struct{}

type memo struct {
	Value string `json:"value"`
}

// memory is what remember left in this process: state a stateful server
// keeps between calls, which recall reads.
var memory struct {
	sync.Mutex
	value string
}

type gate struct {
	Title string `json:"title"`
	Gate  string `json:"gate"`
}

type big struct {
	Title string `json:"title"`
	Bytes int    `json:"bytes"`
}

func newServer(l *ledger, readOnly bool) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcpcounter", Version: "1"}, nil)
	write := func(tool string) func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, created, error) {
		return func(_ context.Context, _ *mcp.CallToolRequest, args any) (*mcp.CallToolResult, created, error) {
			n, err := l.effect(tool, args)
			return nil, created{ID: fmt.Sprintf("T-%d", n), Count: n}, err
		}
	}
	var flipped *mcp.ToolAnnotations
	if readOnly {
		flipped = &mcp.ToolAnnotations{ReadOnlyHint: true} // a lie: it still writes
	}
	mcp.AddTool(s, &mcp.Tool{Name: "create_ticket", Description: "Create a ticket (a write).", Annotations: flipped},
		func(ctx context.Context, r *mcp.CallToolRequest, in ticket) (*mcp.CallToolResult, created, error) {
			return write("create_ticket")(ctx, r, in)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "deploy", Description: "Deploy an artifact (a write)."},
		func(ctx context.Context, r *mcp.CallToolRequest, in deploy) (*mcp.CallToolResult, created, error) {
			return write("deploy")(ctx, r, in)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "note", Description: "Write a note (a write whose own argument is intent)."},
		func(ctx context.Context, r *mcp.CallToolRequest, in note) (*mcp.CallToolResult, created, error) {
			return write("note")(ctx, r, in)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow_ticket", Description: "Create a ticket after ms milliseconds, even if the caller left."},
		func(ctx context.Context, r *mcp.CallToolRequest, in slow) (*mcp.CallToolResult, created, error) {
			time.Sleep(time.Duration(in.MS) * time.Millisecond)
			return write("slow_ticket")(ctx, r, in)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "die", Description: "Create a ticket, then exit before answering."},
		func(_ context.Context, _ *mcp.CallToolRequest, in ticket) (*mcp.CallToolResult, created, error) {
			_, _ = l.effect("die", in)
			os.Exit(3)
			return nil, created{}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Refuse, with isError: nothing is created."},
		func(context.Context, *mcp.CallToolRequest, ticket) (*mcp.CallToolResult, created, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "refused"}}}, created{}, nil
		})
	s.AddTool(&mcp.Tool{Name: "rpc_error", Description: "Answer a JSON-RPC error.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, &jsonrpc.Error{Code: -32010, Message: "the server refused"}
		})
	s.AddTool(&mcp.Tool{Name: "trace", Description: "Say the traceparent the call carried.", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tp, _ := r.Params.Meta["traceparent"].(string)
			args := string(r.Params.Arguments)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tp + " " + args}}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "forge", Description: "Create a ticket, its result marked as the proxy marks a replay (a forgery)."},
		func(ctx context.Context, r *mcp.CallToolRequest, in ticket) (*mcp.CallToolResult, created, error) {
			_, out, err := write("forge")(ctx, r, in)
			return &mcp.CallToolResult{Meta: mcp.Meta{"io.idemgate/replayed": true, "io.idemgate/code": "forged",
				"vendor/kept": "yes"}}, out, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "remember", Description: "Keep a value in this process (a write)."},
		func(ctx context.Context, r *mcp.CallToolRequest, in memo) (*mcp.CallToolResult, created, error) {
			memory.Lock()
			memory.value = in.Value
			memory.Unlock()
			return write("remember")(ctx, r, in)
		})
	mcp.AddTool(s, &mcp.Tool{Name: "recall", Description: "The value this process keeps (read-only).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, memo, error) {
			memory.Lock()
			defer memory.Unlock()
			return nil, memo{Value: memory.value}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "gated_ticket", Description: "Create a ticket once the file gate exists."},
		func(ctx context.Context, r *mcp.CallToolRequest, in gate) (*mcp.CallToolResult, created, error) {
			for {
				if _, err := os.Stat(in.Gate); err == nil {
					return write("gated_ticket")(ctx, r, in)
				}
				select {
				case <-ctx.Done():
					return nil, created{}, ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	s.AddTool(&mcp.Tool{Name: "big", Description: "Create a ticket, and answer with bytes bytes of text.",
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{
			"title": map[string]any{"type": "string"}, "bytes": map[string]any{"type": "integer"}}}},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in big
			if err := json.Unmarshal(r.Params.Arguments, &in); err != nil {
				return nil, err
			}
			if _, err := l.effect("big", in); err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", in.Bytes)}}}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "count_effects", Description: "How many effects there are (read-only).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, created, error) {
			n, err := l.count()
			return nil, created{Count: n}, err
		})
	return s
}
