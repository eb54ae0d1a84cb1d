package gateway

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/httpidem"
)

// logged writes one JSON line per request: never a body, never a token,
// never a query string (it may carry a key or personal data).
func (g *Gateway) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", sw.status), slog.Duration("duration", time.Since(start))}
		if op := sw.Header().Get(httpidem.HeaderOperation); op != "" {
			attrs = append(attrs, slog.String("operation_id", op))
		}
		if sw.Header().Get(httpidem.HeaderReplayed) != "" {
			attrs = append(attrs, slog.Bool("replayed", true))
		}
		g.log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
