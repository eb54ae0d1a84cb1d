package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
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
// after reading it, and says the lost one is unknown when asked; /v1/broken
// is the upstream's own 500 passed through, /v1/busy a store unavailable
// for now, /v1/denied an approver's refusal.
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
		case "/v1/broken":
			sends.Add(1)
			w.WriteHeader(500)
		case "/v1/busy", "/v1/denied":
			sends.Add(1)
			status, code := 503, "store_unavailable"
			if r.URL.Path == "/v1/denied" {
				status, code = 403, "approval_denied"
			}
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"code":%q,"detail":"said by the stub"}`, code)
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

// testKeys are the agent's keys in these tests, which seal intent names
// with them as the server hands them out, so that a test may name its
// intents.
var testKeys, _ = agent.NewKeys([]byte("a-test-secret-of-more-than-sixteen-bytes"), "")

func sealed(name string) string { return testKeys.Seal(name) }

func connect(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	cs, _ := connectClient(t, url)
	return cs
}

// connectClient is connect, with the agent client the server runs.
func connectClient(t *testing.T, url string) (*mcp.ClientSession, *agent.Client) {
	t.Helper()
	ctx := context.Background()
	j, err := agent.OpenJournal(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	c := &agent.Client{BaseURL: url, Token: "server-side-token", Journal: j, Policy: agent.Policy{MaxAttempts: 2},
		Keys: testKeys}
	st, ct := mcp.NewInMemoryTransports()
	if _, err := mcpserver.New(c, "test").Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-model", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, c
}

// call calls a tool and decodes its structured result.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (mcpserver.Result, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var out mcpserver.Result
	if res.StructuredContent != nil { // an error result that did not perform the write keeps its content
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := promisesOnlyWhatItCarries(out); err != nil {
			t.Errorf("%s %v: %v: %+v", tool, args, err, out)
		}
	}
	return out, res
}

// promisesOnlyWhatItCarries checks a result says why, and that its next
// step points at no field left empty.
func promisesOnlyWhatItCarries(r mcpserver.Result) error {
	if r.Reason == "" || !slices.Contains([]string{"no", "maybe", "yes"}, r.Sent) || r.NextStep == "" {
		return fmt.Errorf("no reason, sent or next step")
	}
	_, see, ok := strings.Cut(r.NextStep, "(see ")
	see, _, _ = strings.Cut(see, ")")
	for _, field := range strings.FieldsFunc(see, func(c rune) bool { return c == ',' || c == ' ' }) {
		if (field == "status" && r.Status == 0) || (field == "body" && r.Body == "") || (field == "reason" && r.Reason == "") {
			return fmt.Errorf("the next step points at the empty %s", field)
		}
	}
	if !ok && strings.Contains(r.NextStep, "see status") {
		return fmt.Errorf("the next step points at fields it does not name")
	}
	return nil
}

// listTools is tools/list, as a client connected to a fresh server sees it.
func listTools(t *testing.T) *mcp.ListToolsResult {
	t.Helper()
	var sends atomic.Int32
	res, err := connect(t, gatewayStub(t, &sends).URL).ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestToolsAndSchemas(t *testing.T) {
	res := listTools(t)
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

	// A changed payload under the intent: a tool error, nothing sent, said
	// as every refusal is (kind, sent, next_step), with the mode to pass.
	write["body"] = map[string]any{"title": "Other"}
	for _, mode := range []string{"resume", "repeat"} {
		write["mode"] = mode
		changed, res := call(t, cs, "submit_write", write)
		if !res.IsError || changed.Kind != "conflict" || changed.Sent != "no" || changed.Intent != first.Intent ||
			!strings.Contains(changed.Reason, "differs") || !strings.Contains(changed.NextStep, `mode: "revise"`) ||
			sends.Load() != 1 {
			t.Fatalf("changed payload, mode %s: %+v %+v", mode, changed, res)
		}
	}
	delete(write, "mode")

	// The timeout path: the answer is lost, the gateway says unknown.
	lost, _ := call(t, cs, "submit_write", map[string]any{"intent": sealed("task-9/charge"), "method": "POST", "path": "/v1/lost"})
	if lost.Kind != "unknown" || !strings.Contains(lost.NextStep, "Do not retry") || sends.Load() != 2 {
		t.Fatalf("lost answer: %+v, %d sends", lost, sends.Load())
	}
	for _, args := range []map[string]any{{"intent": sealed("task-9/charge")}, {"operation_id": "op_9"}} {
		st, _ := call(t, cs, "operation_status", args)
		if st.Kind != "unknown" || st.Intent != sealed("task-9/charge") || !strings.Contains(st.Body, `"state":"unknown"`) {
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
	if len(list.Intents) != 1 || list.Intents[0].Intent != sealed("task-9/charge") {
		t.Fatalf("pending: %s", b)
	}
}

func TestMalformedInputIsAnErrorResult(t *testing.T) {
	var sends atomic.Int32
	cs := connect(t, gatewayStub(t, &sends).URL)
	for _, args := range []map[string]any{
		{"method": 7, "path": "/v1/tickets"},
		{"intent": sealed("x"), "method": "POST"},
		{"intent": sealed("x"), "method": "POST", "path": "/v1/tickets", "mode": "again"},
		{"intent": sealed("x"), "method": "POST", "path": "no-slash"},
		{"intent": sealed("x"), "method": "POST", "path": "/v1/tickets", "body": "not json"},
		{"intent": sealed("x"), "method": "POST", "path": "/v1/tickets", "unknown": true},
		{"intent": sealed("x"), "method": "post", "path": "/v1/tickets"},
		{"intent": sealed("x"), "method": "GET", "path": "/v1/tickets"},
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
	// The body is an object: one sent pre-encoded as a string is refused
	// with the type it should have, and nothing is sent.
	if _, res := call(t, cs, "submit_write", map[string]any{"intent": sealed("z"), "method": "POST", "path": "/v1/t",
		"body": `{"a":1}`}); !res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]), `want "object"`) || sends.Load() != 0 {
		t.Fatalf("a JSON string body: %+v", res)
	}
	// The server is still there.
	if st, _ := call(t, cs, "submit_write", map[string]any{"intent": sealed("y"), "method": "POST", "path": "/v1/t"}); st.Kind != "created" {
		t.Fatalf("after bad input: %+v", st)
	}
}

// A write with the gateway down says so: nothing reached it, why, and that
// the same intent may be resumed later; the gateway turning it away for now
// and an approver's final refusal each get their own true next step.
func TestFailuresSayWhatHappened(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	down := "http://" + ln.Addr().String()
	ln.Close()
	var sends atomic.Int32
	up := gatewayStub(t, &sends).URL
	for _, c := range []struct {
		url, path, sent string
		status          int
		reason, next    string
	}{
		{down, "/v1/tickets", "no", 0, "gateway unreachable: connection refused", "Nothing reached the gateway (see reason), so nothing happened. Call submit_write again later with the same intent"},
		{up, "/v1/busy", "yes", 0, "answered 503 store_unavailable: said by the stub", "Not applied for now (see reason). Call submit_write again later"},
		{up, "/v1/denied", "yes", 403, "answered 403 approval_denied: said by the stub", "Failed (see reason, status and body), and resuming this intent will not change that"},
	} {
		cs := connect(t, c.url)
		r, _ := call(t, cs, "submit_write", map[string]any{"intent": sealed("i" + c.path), "method": "POST", "path": c.path})
		if r.Kind != "failed" || r.Sent != c.sent || r.Status != c.status || !strings.Contains(r.Reason, c.reason) ||
			!strings.HasPrefix(r.NextStep, c.next) || strings.Contains(r.Reason, "server-side-token") ||
			strings.Contains(r.Reason, "127.0.0.1") {
			t.Errorf("%s %s: %+v", c.url, c.path, r)
		}
		st, _ := call(t, cs, "operation_status", map[string]any{"intent": sealed("i" + c.path)})
		if c.url == down && (st.Kind != "failed" || st.Sent != "no" ||
			!strings.Contains(st.Reason, "the gateway could not be asked: connection refused")) {
			t.Errorf("status with the gateway down: %+v", st)
		}
	}
}

// list_operations shows every open intent with its last status, reason
// and next step: an unknown one keeps the status that made it unknown
// after a resume that only asked, and a write the gateway never took is
// listed, since resuming may still perform it.
func TestListShowsWhatIsOpen(t *testing.T) {
	var sends atomic.Int32
	srv := gatewayStub(t, &sends)
	cs := connect(t, srv.URL)
	broken := map[string]any{"intent": sealed("task-1/charge"), "method": "POST", "path": "/v1/broken"}
	for range 2 { // sent, the upstream's 500, the gateway says unknown; then a resume that only asks
		if r, _ := call(t, cs, "submit_write", broken); r.Kind != "unknown" || r.Status != 500 {
			t.Fatalf("%+v", r)
		}
	}
	call(t, cs, "submit_write", map[string]any{"intent": sealed("task-1/ticket"), "method": "POST", "path": "/v1/tickets"})
	call(t, cs, "submit_write", map[string]any{"intent": sealed("task-1/deploy"), "method": "POST", "path": "/v1/busy"})
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_operations", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatal(err, res)
	}
	var list mcpserver.ListOutput
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &list)
	if len(list.Intents) != 2 {
		t.Fatalf("open intents: %s", b)
	}
	unknown, busy := list.Intents[0], list.Intents[1]
	if unknown.Intent != sealed("task-1/charge") || unknown.Kind != "unknown" || unknown.Status != 500 || unknown.Sent != "yes" ||
		!strings.Contains(unknown.Reason, "status 500") || !strings.Contains(unknown.NextStep, "operation_status") {
		t.Errorf("unknown: %+v", unknown)
	}
	if busy.Intent != sealed("task-1/deploy") || busy.Kind != "failed" || busy.Method != "POST" || busy.Path != "/v1/busy" ||
		!strings.Contains(busy.NextStep, "Call submit_write again later with the same intent") {
		t.Errorf("turned away for now: %+v", busy)
	}
}

// The body reaches the API as the model wrote it: numbers keep their text,
// and a number a double would round is refused, never rounded (the SDK's
// own decoding turned 9007199254740993 into ...992).
func TestBodyNumbersAreNotRounded(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		w.WriteHeader(201)
	}))
	t.Cleanup(srv.Close)
	cs := connect(t, srv.URL)
	exact := map[string]any{"intent": sealed("pay"), "method": "POST", "path": "/v1/payments",
		"body": map[string]any{"amount": json.RawMessage(`12.50`), "ref": json.RawMessage(`9007199254740991`)}}
	if r, _ := call(t, cs, "submit_write", exact); r.Kind != "created" || got.Load() != `{"amount":12.50,"ref":9007199254740991}` {
		t.Fatalf("%+v, the API got %v", r, got.Load())
	}
	big := map[string]any{"intent": sealed("pay-2"), "method": "POST", "path": "/v1/payments",
		"body": map[string]any{"amount": json.RawMessage(`9007199254740993`)}}
	_, res := call(t, cs, "submit_write", big)
	if text := fmt.Sprintf("%+v", res.Content[0]); !res.IsError || !strings.Contains(text, "would become 9007199254740992") {
		t.Fatalf("an integer a double would round: %s, the API got %v", text, got.Load())
	}
}

// A write whose outcome the journal then fails to record says so in its
// reason, where the error was dropped and the result read as recorded.
func TestJournalFailureAfterSendingIsSaid(t *testing.T) {
	var c *agent.Client
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.Journal.Close() // the disk goes away while the write is at the API
		w.WriteHeader(201)
	}))
	t.Cleanup(srv.Close)
	var cs *mcp.ClientSession
	cs, c = connectClient(t, srv.URL)
	r, _ := call(t, cs, "submit_write", map[string]any{"intent": sealed("i"), "method": "POST", "path": "/v1/x"})
	if r.Kind != "created" || !strings.Contains(r.Reason, "the journal could not record this outcome") {
		t.Fatalf("%+v", r)
	}
}
