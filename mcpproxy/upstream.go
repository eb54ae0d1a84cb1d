package mcpproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// errNotSent is a call that never left the proxy: no upstream session
// could be had. Nothing happened, so the operation is released.
var errNotSent = errors.New("the MCP server is not connected")

// upstream is one MCP server's connection, kept up: a stdio server is
// started, and started again whenever it exits; a Streamable HTTP server
// is connected to again whenever its session ends.
type upstream struct {
	cfg    Server
	log    *slog.Logger
	client *mcp.Client
	// hc is the HTTP client of a Streamable HTTP server, kept across its
	// sessions.
	hc *http.Client
	// connected hears each new session, before any call uses it (the
	// proxy lists its tools then).
	connected func(ctx context.Context, s *mcp.ClientSession) error
	// wrap, if set, wraps each new connection's transport (the proxy
	// records the tools as the server writes them).
	wrap func(mcp.Transport) mcp.Transport

	// redact hides the url's secrets in every error shown or logged.
	redact redactor
	// limit bounds every answer read from the server (maxAnswer, or a
	// tool's larger max_result).
	limit int

	mu      sync.Mutex
	session *mcp.ClientSession
	ready   chan struct{} // closed once session is set; replaced when it ends
	starts  int           // sessions opened so far
}

// maxAnswer bounds an answer the proxy reads from an MCP server, as the
// SDK bounds a stdio line: a larger one is not read, and its call is
// unknown (a tool's larger max_result raises it for its server).
const maxAnswer = mcp.DefaultMaxLineLength

func newUpstream(cfg Server, log *slog.Logger, listChanged func()) *upstream {
	u := &upstream{cfg: cfg, log: log.With(slog.String("mcp_server", cfg.Name)), ready: make(chan struct{}),
		redact: newRedactor(cfg.URL), limit: maxAnswer}
	for _, t := range cfg.Tools {
		u.limit = max(u.limit, int(min(t.MaxResult, 1<<30)))
	}
	if cfg.URL != "" {
		origin := ""
		if parsed, err := url.Parse(cfg.URL); err == nil {
			origin = originOf(parsed)
		}
		// A redirect is never followed (originTransport refuses it): the
		// server's headers stay with its origin, and no call is sent twice.
		u.hc = &http.Client{Transport: &originTransport{origin: origin, headers: cfg.Headers, limit: u.limit, next: pooled()},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	u.client = mcp.NewClient(&mcp.Implementation{Name: "idemgate-mcp-proxy", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { listChanged() },
	})
	return u
}

// run keeps a session open until ctx ends, with a backoff between tries.
func (u *upstream) run(ctx context.Context) {
	wait := 50 * time.Millisecond
	for ctx.Err() == nil {
		s, err := u.connect(ctx)
		if err != nil {
			u.log.Warn("mcp server: connect", slog.String("error", u.redact.text(err.Error())))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(wait*2, 5*time.Second)
			continue
		}
		wait = 50 * time.Millisecond
		stop := context.AfterFunc(ctx, func() { _ = s.Close() }) // a proxy closing ends an HTTP session too
		_ = s.Wait()                                             // the process exited, or the session ended
		stop()
		u.lost(s)
		if ctx.Err() == nil {
			u.log.Warn("mcp server: session ended; reconnecting")
		}
	}
}

// connect opens a session and publishes it once its tools are known.
func (u *upstream) connect(ctx context.Context) (*mcp.ClientSession, error) {
	cctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	defer cancel()
	t := u.transport(ctx)
	if u.wrap != nil {
		t = u.wrap(t)
	}
	s, err := u.client.Connect(cctx, t, nil)
	if err != nil {
		return nil, err
	}
	if err := u.connected(cctx, s); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("listing its tools: %w", err)
	}
	u.mu.Lock()
	u.session = s
	u.starts++
	close(u.ready)
	u.mu.Unlock()
	return s, nil
}

// lost forgets a session that ended: calls wait for the next one.
func (u *upstream) lost(s *mcp.ClientSession) {
	_ = s.Close()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session == s {
		u.session, u.ready = nil, make(chan struct{})
	}
}

// transport is a new connection's: the command, started anew (its
// process lives as long as ctx), or the URL with the configured headers.
func (u *upstream) transport(ctx context.Context) mcp.Transport {
	if len(u.cfg.Command) > 0 {
		cmd := exec.CommandContext(ctx, u.cfg.Command[0], u.cfg.Command[1:]...)
		cmd.Env = append(os.Environ(), u.cfg.Env...)
		cmd.Stderr = os.Stderr
		return &stdioTransport{cmd: cmd, limit: u.limit}
	}
	// The events the proxy hands on are bounded already (bounded): the
	// SDK's own bound, which ends the whole session, is never reached.
	return &mcp.StreamableClientTransport{Endpoint: u.cfg.URL, DisableStandaloneSSE: true, HTTPClient: u.hc,
		MaxEventSize: u.limit + 1<<10}
}

// maxIdlePerServer is how many idle connections to one HTTP MCP server
// are kept: each call in flight is a POST of its own, and the default
// transport keeps 2, so more concurrent calls than that would each dial
// a new connection.
const maxIdlePerServer = 64

// pooled is a transport of the proxy's own, keeping maxIdlePerServer idle
// connections to the server.
func pooled() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = maxIdlePerServer
	return t
}

// current is the open session, waiting at most wait for one.
func (u *upstream) current(ctx context.Context, wait time.Duration) (*mcp.ClientSession, error) {
	u.mu.Lock()
	s, ready := u.session, u.ready
	u.mu.Unlock()
	if s != nil {
		return s, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ready:
		return u.current(ctx, 0)
	case <-t.C:
	case <-ctx.Done():
	}
	return nil, errNotSent
}

// Started is how many sessions the upstream has had: a stdio server's
// processes, counted for tests of its restarts.
func (u *upstream) Started() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.starts
}

// call sends a tools/call. Its error is errNotSent when nothing was sent,
// a *jsonrpc.Error when the server answered with one, and anything else
// when the call was sent and no answer came (a timeout, a lost
// connection): nobody knows whether it took effect.
func (u *upstream) call(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	s, err := u.current(ctx, u.cfg.Timeout)
	if err != nil {
		return nil, err
	}
	ctx, track := tracking(ctx)
	res, err := s.CallTool(ctx, p)
	switch {
	case err == nil, answered(err):
		return res, err
	case track.unsent():
		// The POST that carries the call never wrote its headers (the
		// connection was refused, the name did not resolve): nothing left.
		return nil, u.redact.err(fmt.Errorf("%w: %w", errNotSent, err))
	case track.sessionGone.Load():
		// The server answered 404 to the session's id: it has restarted
		// and knows nothing of the session, so it ran nothing (the MCP
		// transport's rule). The session is dropped at once, so that the
		// retry waits for the next one rather than meeting this one.
		u.lost(s)
		return nil, u.redact.err(fmt.Errorf("%w: %w", errNotSent, err))
	}
	return nil, u.redact.err(fmt.Errorf("%w: %w", errNoAnswer, err))
}

// sendTrack says whether the HTTP request that carries a call wrote its
// headers: the one proof that nothing reached the server. A call whose
// request the transport never saw (a stdio server) is never unsent.
type sendTrack struct{ seen, wrote, sessionGone atomic.Bool }

type trackKey struct{}

func tracking(ctx context.Context) (context.Context, *sendTrack) {
	t := &sendTrack{}
	return context.WithValue(ctx, trackKey{}, t), t
}

func (t *sendTrack) unsent() bool { return t.seen.Load() && !t.wrote.Load() }

// errNoAnswer is a call sent that got no answer.
var errNoAnswer = errors.New("no answer from the MCP server")

// answered reports whether err is the server's own JSON-RPC error, not
// one the SDK makes when the connection closes.
func answered(err error) bool {
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		return false
	}
	switch werr.Code {
	case -32003, -32004, -32005: // client closing, server closing, rejected by transport
		return false
	case codeTooLarge: // the proxy's stand-in for an answer it did not read
		return !strings.Contains(string(werr.Data), tooLargeMark) && !strings.Contains(werr.Message, "the proxy reads")
	}
	return true
}
