package drill

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/internal/yamlfile"
)

// MCPScenario is a drill of an MCP server's write tool (docs/design.md,
// "MCP proxy"): the endpoint (the proxy's /mcp/{name}, or the server
// itself), the tool and its arguments, the argument that names an intent
// (the proxy's; none straight to a server that has no retry identity),
// and how to count the tool's effects: a read-only tool, or a GET.
type MCPScenario struct {
	Target  string            `yaml:"target"`
	Headers map[string]string `yaml:"headers"`
	Tool    string            `yaml:"tool"`
	// Arguments is a text/template over .n and .run rendering a JSON
	// object: distinct actions must differ.
	Arguments string `yaml:"arguments"`
	Intent    string `yaml:"intent"`
	Effects   struct {
		Tool string `yaml:"tool"`
		Get  string `yaml:"get"`
		// Pointer is where the count is, in the tool's structured content
		// or the GET's JSON body; without it, the tool's text (or the
		// body) is the number.
		Pointer string `yaml:"pointer"`
	} `yaml:"effects"`

	file    string
	args    *template.Template
	pointer []string
}

// IsMCPScenario reports whether a scenario file is an MCP one: its top
// level has mcp:.
func IsMCPScenario(data []byte) bool {
	var top map[string]any
	return yaml.Unmarshal(data, &top) == nil && top["mcp"] != nil
}

// LoadMCPScenario reads and checks an MCP scenario file (its settings
// under mcp:); every mistake is an error naming the file.
func LoadMCPScenario(path string) (*MCPScenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return ParseMCPScenario(path, data)
}

// ParseMCPScenario is LoadMCPScenario on data already read.
func ParseMCPScenario(path string, data []byte) (*MCPScenario, error) {
	var doc struct {
		MCP *MCPScenario `yaml:"mcp"`
	}
	if _, err := yamlfile.Decode(path, data, &doc); err != nil {
		return nil, err
	}
	if doc.MCP == nil {
		return nil, fmt.Errorf("%s: no mcp: section", path)
	}
	doc.MCP.file = path
	return doc.MCP, doc.MCP.check()
}

func (s *MCPScenario) check() error {
	u, err := url.Parse(s.Target)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%s: mcp.target %q: want the MCP endpoint's http(s) URL", s.file, s.Target)
	case s.Tool == "":
		return fmt.Errorf("%s: mcp.tool is required", s.file)
	case (s.Effects.Tool == "") == (s.Effects.Get == ""):
		return fmt.Errorf("%s: mcp.effects: name a read-only tool or a GET (one of them)", s.file)
	}
	for name, v := range s.Headers {
		if !validHeader(name, v) {
			return fmt.Errorf("%s: mcp.headers: %q is not a valid HTTP field", s.file, name)
		}
	}
	if s.pointer, err = jsonptr.Parse(s.Effects.Pointer); err != nil {
		return fmt.Errorf("%s: mcp.effects.pointer: %v", s.file, err)
	}
	if s.args, err = template.New("arguments").Option("missingkey=error").Parse(s.Arguments); err != nil {
		return fmt.Errorf("%s: mcp.arguments: %v", s.file, err)
	}
	one, err1 := s.arguments(1, "r")
	two, err2 := s.arguments(2, "r")
	if err := errors.Join(err1, err2); err != nil || fmt.Sprint(one) == fmt.Sprint(two) {
		return fmt.Errorf("%s: mcp.arguments: want a JSON object that names {{.n}} (%v)", s.file, err)
	}
	return nil
}

// arguments renders action n's arguments.
func (s *MCPScenario) arguments(n int, run string) (map[string]any, error) {
	b, err := render(s.args, map[string]any{"n": n, "run": run})
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, fmt.Errorf("not a JSON object: %.60s", b)
	}
	return m, nil
}

// mcpChecks are the MCP drill's checks: an agent's retries of a tool call.
var mcpChecks = []struct {
	id, name string
	fn       func(*MCPRunner, context.Context) Result
}{
	{"mcp-lost", "lost response, then a retry", (*MCPRunner).lost},
	{"mcp-concurrent", "concurrent copies of one call", (*MCPRunner).concurrent},
	{"mcp-changed", "arguments changed under one intent", (*MCPRunner).changed},
	{"mcp-restart", "agent restarted between attempts", (*MCPRunner).restarted},
}

// MCPRunner runs an MCP scenario's checks.
type MCPRunner struct {
	Scenario *MCPScenario
	Timeout  time.Duration // one call (10s)
	run      string
	n        atomic.Int64
}

// Run runs every check, in order.
func (r *MCPRunner) Run(ctx context.Context) ([]Result, error) {
	if r.Timeout <= 0 {
		r.Timeout = 10 * time.Second
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	r.run = hex.EncodeToString(b[:])
	out := make([]Result, 0, len(mcpChecks))
	for _, c := range mcpChecks {
		res := c.fn(r, ctx)
		res.ID, res.Check, res.Covers = c.id, c.name, []string{}
		if res.Verdict == FailedCheck && res.Finding == "" {
			res.Finding = FindingError
		}
		out = append(out, res)
	}
	return out, nil
}

// mcpAction is one intended action: its intent and arguments.
type mcpAction struct {
	intent string
	args   map[string]any
}

func (r *MCPRunner) next() (mcpAction, error) {
	n := int(r.n.Add(1))
	args, err := r.Scenario.arguments(n, r.run)
	return mcpAction{intent: fmt.Sprintf("drill-%s-%d", r.run, n), args: args}, err
}

// session opens a new MCP session, as a new agent process would, through
// a transport that can lose the next tool call's answer.
func (r *MCPRunner) session(ctx context.Context, t http.RoundTripper) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "idemgate-drill", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.Scenario.Target, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: headers{r.Scenario.Headers, t}}}, nil)
}

// call makes one call of a in a new session; ok is a result without
// isError.
func (r *MCPRunner) call(ctx context.Context, t http.RoundTripper, a mcpAction) (ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	s, err := r.session(ctx, t)
	if err != nil {
		return false, err
	}
	defer s.Close()
	args := make(map[string]any, len(a.args)+1)
	for k, v := range a.args {
		args[k] = v
	}
	if r.Scenario.Intent != "" {
		args[r.Scenario.Intent] = a.intent
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: r.Scenario.Tool, Arguments: args})
	if err != nil {
		return false, err
	}
	return !res.IsError, nil
}

// headers adds the scenario's headers (credentials) to every request.
type headers struct {
	h    map[string]string
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t headers) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.h {
		req.Header.Set(k, v)
	}
	if t.next == nil {
		return http.DefaultTransport.RoundTrip(req)
	}
	return t.next.RoundTrip(req)
}

// loser delivers the first tools/call to the target, waits for its whole
// answer (the effect is done), and loses it: the agent sees a broken
// connection.
type loser struct{ once sync.Once }

// RoundTrip implements http.RoundTripper.
func (l *loser) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.Body != nil {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		lose := false
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			l.once.Do(func() { lose = true })
		}
		if lose {
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			return nil, errors.New("drill: the answer was lost")
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

// effects counts the effects, by the scenario's tool or GET.
func (r *MCPRunner) effects(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	var doc any
	var text string
	if e := r.Scenario.Effects; e.Tool != "" {
		s, err := r.session(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: e.Tool, Arguments: map[string]any{}})
		if err != nil || res.IsError {
			return 0, fmt.Errorf("effects tool %s: %v", e.Tool, err)
		}
		doc = res.StructuredContent
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				text += t.Text
			}
		}
	} else {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.Get, nil)
		resp, err := headers{r.Scenario.Headers, nil}.RoundTrip(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		text = string(b)
		_ = json.Unmarshal(b, &doc)
	}
	return countOf(doc, text, r.Scenario.pointer)
}

// countOf reads the count at pointer in doc, or text as a number.
func countOf(doc any, text string, pointer []string) (int64, error) {
	if pointer != nil {
		b, _ := json.Marshal(doc)
		var v any
		_ = json.Unmarshal(b, &v)
		if x, ok := jsonptr.Get(v, pointer); ok {
			if f, ok := x.(float64); ok {
				return int64(f), nil
			}
		}
		return 0, fmt.Errorf("no number at the effects pointer in %.80s", b)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the effects count %.40q is not a number", text)
	}
	return n, nil
}

// judged counts effects around act, and judges them against expected.
func (r *MCPRunner) judged(ctx context.Context, expected int64, act func() (requests int, finding, reason string)) Result {
	before, err := r.effects(ctx)
	if err != nil {
		return Result{Verdict: FailedCheck, Reason: err.Error()}
	}
	requests, finding, reason := act()
	after, err := r.effects(ctx)
	if err != nil {
		return Result{Verdict: FailedCheck, Reason: err.Error(), Requests: requests}
	}
	res := Result{Requests: requests, Effects: after - before, Expected: expected, Verdict: Passed, Reason: reason}
	switch {
	case res.Effects > expected:
		res.Verdict, res.Finding = FailedCheck, FindingDuplicate
		res.Reason = fmt.Sprintf("%d effects for %d intended", res.Effects, expected)
	case res.Effects < expected:
		res.Verdict, res.Finding = FailedCheck, FindingMissing
		res.Reason = fmt.Sprintf("%d effects for %d intended", res.Effects, expected)
	case finding != "":
		res.Verdict, res.Finding = FailedCheck, finding
	}
	return res
}
