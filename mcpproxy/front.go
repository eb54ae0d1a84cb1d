package mcpproxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// maxMessage bounds a message a client posts (the SDK's own default).
const maxMessage = 10 << 20

// baseKey is where the scheme and host the client reached ride, to make
// the approval page's URL absolute.
const baseKey = "idemgate.base"

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
		return &auth.TokenInfo{UserID: pr.Tenant + "/" + pr.Name, Expiration: time.Now().Add(time.Hour),
			Extra: map[string]any{principalKey: pr, baseKey: scheme + "://" + r.Host}}, nil
	}
	authed := auth.RequireBearerToken(verify, nil)(next)
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
				writeRPCError(w, -32600, "JSON-RPC batches are refused: send one message per request")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		authed.ServeHTTP(w, r)
	})
}

// isBatch reports whether a posted body is a JSON array.
func isBatch(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '['
}

func writeRPCError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":`+strconv.Itoa(code)+`,"message":"`+msg+`"}}`)
}
