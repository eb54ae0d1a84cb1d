// Package mcpproxy is idemgate in front of MCP servers (docs/design.md,
// "MCP proxy"): each configured server is served at /mcp/{name} over
// Streamable HTTP, and each guarded tool call is a command of the keyed
// executor (package keyed), as a keyed HTTP write is: reserved under the
// key its intent names, in the server's own namespace, fingerprinted by
// its arguments, forwarded once, recorded, replayed, refused when
// changed, waited for while in progress, unknown or waiting for a human.
// It is the executor's MCP adapter: a receiving middleware of the
// official MCP Go SDK on typed tools/call requests, which maps a call to
// a keyed.Command and the keyed.Result back to a tool result; no HTTP
// request is made of a call.
//
// proxy.go is the wiring, upstream.go the connection to each server
// (started again when it dies), tools.go what the proxy lists and checks
// of a tool, call.go a guarded call through the executor, answer.go the
// answer a model reads, status.go operation_status.
package mcpproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
)

// Server is one MCP server behind the proxy: a stdio server the proxy
// starts (Command, with Env added to its environment), or a Streamable
// HTTP server (URL, sent Headers, which no client ever sees).
type Server struct {
	Name    string
	Command []string
	Env     []string
	URL     string
	Headers map[string]string
	// Timeout bounds a call: one unanswered past it is unknown (30s).
	Timeout time.Duration
	// Tools are the tools' own settings, by name.
	Tools map[string]Tool
	// Roles and Tenants, if set, are the roles (one of them) and the
	// tenants whose principals may use the server; anyone else is refused
	// before a session opens.
	Roles, Tenants []string
	// Isolation is who shares an upstream session (and a stdio server's
	// process): "tenant" (the default: each tenant its own), "principal",
	// or "shared" (everyone).
	Isolation string
	// IsolatedIdle is how long an isolated upstream with no call in
	// flight is kept before it is stopped (10m).
	IsolatedIdle time.Duration
}

// Tool is a tool's settings. Guard, if set, decides whether it is
// guarded; otherwise it is unless the server says readOnlyHint. The rest
// are its operations' policies, as a route's; MaxResult bounds the result
// an operation keeps (default contract.DefaultMaxResponse): a larger one
// is given whole to the call that ran it, and a stand-in is kept.
type Tool struct {
	Guard *bool
	// Roles, if set, are the roles (one of them) a caller needs to call
	// the tool; anyone else is refused, nothing reserved or sent.
	Roles                       []string
	BusinessKey, ConcurrencyKey string
	Retention, Lease            time.Duration
	Approval                    *approval.Policy
	MaxResult                   int64
}

// Options configure the proxy. Servers, Executor and Caller are required.
type Options struct {
	Servers []Server
	// Executor runs the guarded calls: the one the gateway's routes share
	// (its store, the tenants' limits, the audit log, the metrics).
	Executor *keyed.Executor
	// Caller is the principal the listener's authentication found.
	Caller func(r *http.Request) (approval.Principal, bool)
	// ApprovalURL is where a human decides an approval: the web page.
	ApprovalURL func(id string) string
	Logger      *slog.Logger
	// Tracer, if set, traces each call sent upstream (a client span,
	// "tools/call TOOL") and hands its trace context on in the call's
	// _meta; nil traces nothing.
	Tracer trace.Tracer
	// Sessions bound the clients' sessions (their defaults if zero);
	// Observer hears of them (the metrics), and Now is the clock their
	// idleness is read on (time.Now if nil).
	Sessions Sessions
	Observer Observer
	Now      func() time.Time
}

// Proxy serves the configured MCP servers.
type Proxy struct {
	opts    Options
	servers map[string]*proxied
	handler http.Handler
	stop    context.CancelFunc
	wg      sync.WaitGroup
	// sessions are the clients' open sessions, of every server.
	sessions *registry
	// streams ends with EndStreams: the clients' event streams end.
	streams    context.Context
	endStreams context.CancelFunc
}

// New starts a connection to every server and waits, up to each one's
// timeout, for its tools: a client that connects at once sees them. A
// server that is not up by then is connected to in the background.
func New(opts Options) (*Proxy, error) {
	if opts.Caller == nil || opts.Executor == nil {
		return nil, errors.New("mcpproxy: Caller and Executor are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ApprovalURL == nil {
		opts.ApprovalURL = func(id string) string { return "/ui/approvals/" + id }
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &Proxy{opts: opts, servers: map[string]*proxied{}, stop: stop,
		sessions: newRegistry(opts.Sessions, opts.Now, opts.Observer)}
	p.streams, p.endStreams = context.WithCancel(context.Background())
	for _, s := range opts.Servers {
		if s.Timeout <= 0 {
			s.Timeout = 30 * time.Second
		}
		if _, dup := p.servers[s.Name]; dup || s.Name == "" {
			stop()
			return nil, fmt.Errorf("mcpproxy: server %q is unnamed or named twice", s.Name)
		}
		p.servers[s.Name] = newProxied(p, s)
	}
	for _, ps := range p.servers {
		ps.pool = &pool{ps: ps, ctx: ctx, idle: cmp.Or(ps.cfg.IsolatedIdle, isolatedIdle), members: map[string]*member{}}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); ps.up.run(ctx) }()
		go func() { defer p.wg.Done(); ps.pool.sweep() }()
	}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.sessions.sweep(ctx) }()
	for _, ps := range p.servers {
		_, _ = ps.up.current(ctx, ps.cfg.Timeout)
	}
	p.handler = p.mux()
	return p, nil
}

// Handler serves contract.MCPPath + "/{name}"; the caller puts it behind
// authentication. An unknown name is 404.
func (p *Proxy) Handler() http.Handler { return p.handler }

// Close stops every server the proxy started, and closes every session.
func (p *Proxy) Close() {
	p.endStreams()
	p.stop()
	p.wg.Wait()
	for _, ps := range p.servers {
		for ss := range ps.srv.Sessions() {
			_ = ss.Close()
		}
	}
}

// Started is how many sessions server has had (its stdio processes):
// the one that lists its tools, and each isolated one (counted for tests
// of restarts).
func (p *Proxy) Started(server string) int {
	if ps := p.servers[server]; ps != nil {
		return ps.up.Started() + ps.pool.started()
	}
	return 0
}

// Isolated is how many isolated upstreams of server are up now: a
// tenant's (or a principal's) own session or process.
func (p *Proxy) Isolated(server string) int {
	if ps := p.servers[server]; ps != nil {
		return ps.pool.running()
	}
	return 0
}

func (p *Proxy) mux() http.Handler {
	mux := http.NewServeMux()
	for name, ps := range p.servers {
		mux.Handle(contract.MCPPath+"/"+name, ps.admitted(p.caller(ps.http)))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		contract.NewProblem(contract.CodeNotFound, "no MCP server at "+r.URL.EscapedPath()).Write(w)
	})
	return mux
}

// proxied is one server as the proxy serves it: its upstream, the MCP
// server its clients talk to, and its tools.
type proxied struct {
	p    *Proxy
	cfg  Server
	up   *upstream // the shared upstream: it lists the tools
	pool *pool     // the isolated upstreams (Server.Isolation)
	srv  *mcp.Server
	http http.Handler
	// raw keeps the upstream's tools as it wrote them.
	raw *rawTools

	mu    sync.Mutex
	tools map[string]*tool
	shown map[string]string // each served tool as its clients see it (JSON)
}

func newProxied(p *Proxy, s Server) *proxied {
	ps := &proxied{p: p, cfg: s, tools: map[string]*tool{}, raw: newRawTools()}
	ps.srv = mcp.NewServer(&mcp.Implementation{Name: "idemgate/" + s.Name, Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		Logger:       sdkLogger(p.opts.Logger),
	})
	ps.srv.AddTool(statusTool(), ps.status)
	ps.srv.AddReceivingMiddleware(p.tracked, ps.guard)
	ps.up = newUpstream(s, p.opts.Logger, ps.refresh)
	ps.up.connected = ps.list
	ps.up.wrap = ps.raw.wrap
	if ps.up.hc != nil { // an HTTP server's
		ps.up.hc.Transport = recordingRT{next: ps.up.hc.Transport, r: ps.raw}
	}
	// JSONResponse: a call is answered with one application/json body
	// rather than an SSE stream of one event, which every Streamable HTTP
	// client accepts and costs a replay about a tenth less. What is not an
	// answer (an approval's URL elicitation) goes on the session's
	// standalone stream, which clients open by default; without it the
	// refusal's text still carries the URL.
	ps.http = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ps.srv },
		&mcp.StreamableHTTPOptions{Logger: sdkLogger(p.opts.Logger), JSONResponse: true})
	return ps
}

// refresh lists the tools again after the server said they changed.
func (ps *proxied) refresh() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ps.cfg.Timeout)
		defer cancel()
		if s, err := ps.up.current(ctx, 0); err == nil {
			if err := ps.list(ctx, s); err != nil {
				ps.p.opts.Logger.Warn("mcp server: listing its tools", slog.String("mcp_server", ps.cfg.Name),
					slog.String("error", ps.up.redact.text(err.Error())))
			}
		}
	}()
}
