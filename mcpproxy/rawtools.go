package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The proxy lists each upstream tool as the server wrote it: the SDK's
// typed client drops what its Tool does not know (execution.taskSupport)
// and adds what it always writes (idempotentHint: false). So the bytes of
// each tools/list answer are kept as they arrive (rawTools), and served
// again (listedTools), with only the intent argument the proxy adds.

// maxToolList bounds a tools/list answer read for its tools' bytes.
const maxToolList = 16 << 20

// rawTools keeps the upstream's tool definitions, as written, by name.
type rawTools struct {
	mu      sync.Mutex
	pending map[string]bool // the ids of tools/list requests sent
	byName  map[string]json.RawMessage
}

func newRawTools() *rawTools {
	return &rawTools{pending: map[string]bool{}, byName: map[string]json.RawMessage{}}
}

func idKey(id jsonrpc.ID) string { b, _ := json.Marshal(id.Raw()); return string(b) }

// sent notes a tools/list request.
func (r *rawTools) sent(msg jsonrpc.Message) {
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/list" && req.IsCall() {
		r.mu.Lock()
		r.pending[idKey(req.ID)] = true
		r.mu.Unlock()
	}
}

// received keeps the tools of an answer to a tools/list request.
func (r *rawTools) received(msg jsonrpc.Message) {
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.pending[idKey(resp.ID)] {
		return
	}
	delete(r.pending, idKey(resp.ID))
	var res struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(resp.Result, &res) != nil {
		return
	}
	for _, t := range res.Tools {
		var named struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(t, &named) == nil && named.Name != "" {
			r.byName[named.Name] = t
		}
	}
}

// of is the tool named name as the server wrote it, or nil.
func (r *rawTools) of(name string) json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[name]
}

// wrap records the messages of a transport whose connection has no
// hooks of the SDK's own (a stdio server's); a Streamable HTTP server's
// is recorded by its HTTP client (roundTrip), its connection left as is.
func (r *rawTools) wrap(t mcp.Transport) mcp.Transport {
	if _, ok := t.(*mcp.StreamableClientTransport); ok {
		return t
	}
	return recordingTransport{t, r}
}

type recordingTransport struct {
	mcp.Transport
	r *rawTools
}

// Connect implements mcp.Transport.
func (t recordingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return recordingConn{c, t.r}, nil
}

type recordingConn struct {
	mcp.Connection
	r *rawTools
}

// Read implements mcp.Connection.
func (c recordingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		c.r.received(msg)
	}
	return msg, err
}

// Write implements mcp.Connection.
func (c recordingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	c.r.sent(msg)
	return c.Connection.Write(ctx, msg)
}

// recordingRT is a Streamable HTTP server's HTTP client, recording the
// messages it posts and the answers, JSON or event streams.
type recordingRT struct {
	next http.RoundTripper
	r    *rawTools
}

// RoundTrip implements http.RoundTripper. Only a tools/list's answer is
// read here; every other request and answer passes as it is.
func (t recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	listing := false
	if req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, maxMessage))
			_ = body.Close()
			if msg, err := jsonrpc.DecodeMessage(b); err == nil {
				r, ok := msg.(*jsonrpc.Request)
				listing = ok && r.Method == "tools/list"
				t.r.sent(msg)
			}
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || !listing {
		return resp, err
	}
	switch ct := resp.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/json"):
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxToolList))
		if rerr == nil && len(b) < maxToolList {
			if msg, err := jsonrpc.DecodeMessage(b); err == nil {
				t.r.received(msg)
			}
		}
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(b), errReader{rerr}, resp.Body), resp.Body}
	case strings.HasPrefix(ct, "text/event-stream"):
		resp.Body = &sseTap{body: resp.Body, r: t.r}
	}
	return resp, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// errReader is a read's error, if any, else the end of its part.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// sseTap reads an event stream for the SDK, recording each message of a
// data line as the line passes (before the SDK can act on it).
type sseTap struct {
	body io.ReadCloser
	r    *rawTools
	line bytes.Buffer
}

func (s *sseTap) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	for _, b := range p[:n] {
		if b != '\n' {
			if s.line.Len() < maxToolList {
				s.line.WriteByte(b)
			}
			continue
		}
		if data, ok := bytes.CutPrefix(bytes.TrimRight(s.line.Bytes(), "\r"), []byte("data:")); ok {
			if msg, err := jsonrpc.DecodeMessage(bytes.TrimSpace(data)); err == nil {
				s.r.received(msg)
			}
		}
		s.line.Reset()
	}
	return n, err
}

func (s *sseTap) Close() error { return s.body.Close() }

// listedTools is a tools/list answer with each tool as its server wrote
// it (what the proxy adds aside): the SDK's result, with its tools
// replaced when it is encoded.
type listedTools struct {
	*mcp.ListToolsResult
	tools []json.RawMessage
}

// MarshalJSON implements json.Marshaler.
func (l *listedTools) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(l.ListToolsResult)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m["tools"], err = json.Marshal(l.tools); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// asWritten is a tools/list result with each upstream tool as written
// (the proxy's own, and one whose bytes were not seen, as the SDK has it).
func (ps *proxied) asWritten(res mcp.Result) mcp.Result {
	lr, ok := res.(*mcp.ListToolsResult)
	if !ok {
		return res
	}
	out := &listedTools{ListToolsResult: lr, tools: make([]json.RawMessage, 0, len(lr.Tools))}
	for _, t := range lr.Tools {
		if own := ps.lookup(t.Name); own != nil && own.listed != nil {
			out.tools = append(out.tools, own.listed)
			continue
		}
		b, err := json.Marshal(t)
		if err != nil {
			return res
		}
		out.tools = append(out.tools, b)
	}
	return out
}

// written is up as its server wrote it, with schema (if not nil) as its
// inputSchema; nil when its bytes were not seen.
func (ps *proxied) written(name string, schema map[string]any) json.RawMessage {
	raw := ps.raw.of(name)
	if raw == nil || schema == nil {
		return raw
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	var err error
	if m["inputSchema"], err = json.Marshal(schema); err != nil {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}
