package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// logged writes one JSON line per request: never a body, never a token,
// never a query string (it may carry a key or personal data).
func (g *Gateway) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK, ctx: r.Context()}
		if r.Body != nil && r.Body != http.NoBody {
			sw.body = &eofBody{ReadCloser: r.Body}
			r.Body = sw.body
		}
		next.ServeHTTP(sw, r)
		if sw.body != nil && !sw.body.eof.Load() {
			// The server would still read what is left of the body after the
			// answer; a body that trickles would hold the connection until
			// the body deadline.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		}
		attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", sw.status), slog.Duration("duration", time.Since(start))}
		if op := sw.Header().Get(contract.HeaderOperation); op != "" {
			attrs = append(attrs, slog.String("operation_id", op))
		}
		if sw.Header().Get(contract.HeaderReplayed) != "" {
			attrs = append(attrs, slog.Bool("replayed", true))
		}
		g.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	})
}

// statusWriter keeps the status for the log line, and closes the
// connection after an answer given before the request's body was read to
// its end (a refusal, mostly): the server would otherwise read what is left
// of the body before it sends the answer, and a client that trickles it
// would get its 401 only at the body deadline, holding its connection. The
// close lingers (linger.go), so that a client still writing its body can
// read why.
type statusWriter struct {
	http.ResponseWriter
	status int
	body   *eofBody // nil: the request has no body
	wrote  bool
	ctx    context.Context // the request's
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote && s.body != nil && !s.body.eof.Load() {
		s.Header().Set("Connection", "close")
		lingerAfter(s.ctx)
	}
	s.status, s.wrote = code, true
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if !s.wrote {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(p)
}

// eofBody notes that its body was read to the end (a proxied read's body
// is read by the transport's goroutine, hence the atomic).
type eofBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
