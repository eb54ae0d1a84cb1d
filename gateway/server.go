package gateway

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
)

// Server is the gateway's HTTP server with the limits that keep slow or
// stalled clients from holding it: deadlines on headers, bodies and idle
// connections, a bound on header size and on connections served at once
// (Config's read_header_timeout, body_timeout, idle_timeout,
// max_header_bytes, max_conns, max_conns_per_client). Every program that serves a gateway builds
// its server with NewServer, so that none of them forgets a limit.
type Server struct {
	srv                 *http.Server
	maxConns, perClient int
	tls                 *tls.Config // nil: plain HTTP
}

// NewServer builds the server of the gateway's whole HTTP surface, h
// (its Front, around every plane it serves).
func (g *Gateway) NewServer(h http.Handler) *Server {
	c := g.cfg
	return &Server{maxConns: c.MaxConns, perClient: c.MaxConnsPerClient, tls: c.ListenerTLS(), srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ConnContext:       withConn, // for a lingering close (linger.go)
		// The whole request's deadline: a body that trickles, or that
		// announces 100 bytes and sends one, is cut there, whether the
		// handler reads it or the server drains it after a refusal. The
		// server lifts it once the body has been read to its end (or at
		// once when there is none), so neither a long Prefer: wait nor a
		// slow upstream is cut by it.
		ReadTimeout:    c.ReadHeaderTimeout + c.BodyTimeout,
		IdleTimeout:    c.IdleTimeout,
		MaxHeaderBytes: int(c.MaxHeaderBytes),
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}}
}

// Serve serves ln until Shutdown or Close, at most max_conns connections
// at once: past them, the longest idle keep-alive connection is closed to
// make room, and with none idle the newcomer waits until one ends. One
// client holds at most max_conns_per_client of them (see connLimit).
// With tls, every connection is TLS (its handshake within
// read_header_timeout), counted against the limits before it.
func (s *Server) Serve(ln net.Listener) error {
	l := newConnLimit(ln, s.maxConns, s.perClient)
	s.srv.ConnState = l.track
	if s.tls != nil {
		return s.srv.Serve(tls.NewListener(l, s.tls))
	}
	return s.srv.Serve(l)
}

// Shutdown stops accepting connections and waits, until ctx ends, for the
// requests in flight to finish (http.Server.Shutdown).
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection at once.
func (s *Server) Close() error { return s.srv.Close() }
