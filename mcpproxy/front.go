package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/approval"
)

// maxMessage bounds a message a client posts (the SDK's own default).
const maxMessage = 10 << 20

// baseKey is where the scheme and host the client reached ride, to make
// the approval page's URL absolute.
const baseKey = "idemgate.base"

// sessionHeader is the Streamable HTTP transport's session header.
const sessionHeader = "Mcp-Session-Id"

// caller admits a request to a server's MCP endpoint: the listener's
// principal is handed to the SDK as the session's user (a session is
// then its creator's alone), and a JSON-RPC batch, which the protocol no
// longer has, is refused before anything reads it.
func (p *Proxy) caller(next http.Handler) http.Handler {
	verify := func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		pr, ok := p.opts.Caller(r)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		return &auth.TokenInfo{UserID: ownerOf(pr).userID(), Expiration: time.Now().Add(time.Hour),
			Extra: map[string]any{principalKey: pr, baseKey: scheme + "://" + r.Host}}, nil
	}
	authed := auth.RequireBearerToken(verify, nil)(p.front(next))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
			switch {
			case err != nil:
				http.Error(w, "reading the message: "+err.Error(), http.StatusBadRequest)
				return
			case len(body) > maxMessage:
				http.Error(w, "message too large", http.StatusRequestEntityTooLarge)
				return
			case isBatch(body):
				writeRPCError(w, http.StatusBadRequest, -32600, "JSON-RPC batches are refused: send one message per request")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		authed.ServeHTTP(w, r)
	})
}

// front is what the proxy checks of an authenticated request before the
// SDK serves it: while the gateway shuts down, no new session or event
// stream; a session is used by its owner only; an event stream ends
// when the gateway shuts down (EndStreams), and the request's trace is
// handed to the calls it carries.
func (p *Proxy) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(sessionHeader)
		if p.streams.Err() != nil && (id == "" || r.Method == http.MethodGet) {
			w.Header().Set("Retry-After", "1")
			writeRPCError(w, http.StatusServiceUnavailable, codeShuttingDown,
				"the gateway is shutting down: connect again (to another instance)")
			return
		}
		if o, ok := p.sessions.ownerOf(id); ok {
			if pr, _ := principalOf(&mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context())}); ownerOf(pr) != o {
				writeRPCError(w, http.StatusForbidden, codeNotYourSession,
					"this MCP session is another principal's: open a session of your own (initialize without "+sessionHeader+")")
				return
			}
		}
		if r.Method == http.MethodGet {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			stop := context.AfterFunc(p.streams, cancel)
			defer stop()
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, withTrace(r))
	})
}

// withTrace puts the request's own span (the listener's, when it traces)
// in its traceparent header, which the SDK hands each call (Extra.Header):
// go-sdk binds a session's calls to the context of its initialize
// request, not to the request that carries each one.
func withTrace(r *http.Request) *http.Request {
	sc := trace.SpanContextFromContext(r.Context())
	if !sc.IsValid() {
		return r
	}
	r = r.Clone(r.Context())
	propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return r
}

// EndStreams ends every client's event stream, and refuses new sessions
// and streams: a graceful shutdown does it first, for an idle client's
// stream never ends on its own. Calls in flight, and those of open
// sessions, are still answered.
func (p *Proxy) EndStreams() { p.endStreams() }

// isBatch reports whether a posted body is a JSON array.
func isBatch(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '['
}

// writeRPCError answers a request the SDK never sees with a JSON-RPC
// error, the shape MCP clients read of a failed POST.
func writeRPCError(w http.ResponseWriter, status int, code int64, msg string) {
	b, _ := json.Marshal(struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{JSONRPC: "2.0", Error: &jsonrpc.Error{Code: code, Message: msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// principalKey is where the caller's principal rides in the token info
// the SDK hands each request.
const principalKey = "idemgate.principal"

// principalOf is the caller's principal of a request's extra.
func principalOf(extra *mcp.RequestExtra) (approval.Principal, bool) {
	if extra == nil || extra.TokenInfo == nil {
		return approval.Principal{}, false
	}
	p, ok := extra.TokenInfo.Extra[principalKey].(approval.Principal)
	return p, ok
}
