package mcpproxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/approval"
)

// Sessions bound the client sessions of the proxy's Streamable HTTP
// front: each one holds the SDK's state for its client until the client
// ends it, so nothing else frees one a client forgot.
type Sessions struct {
	// IdleTimeout closes a session no request used for this long, none
	// in flight (default 30m). An open event stream (GET) is no use: a
	// client that wants its session kept pings.
	IdleTimeout time.Duration
	// PerPrincipal is how many sessions one principal (a tenant's name)
	// may hold at once (default 100); a new one past it is refused.
	PerPrincipal int
	// Max is how many sessions the proxy holds at once, of every
	// principal (default 10000).
	Max int
}

// The session limits' defaults (config's too).
const (
	DefaultSessionIdle  = 30 * time.Minute
	DefaultPerPrincipal = 100
	DefaultMaxSessions  = 10000
)

// The limits a new session is refused at, as Observer hears them.
const (
	LimitPerPrincipal = "per_principal"
	LimitMax          = "max"
)

const (
	// sweepEveryAtMost and sweepEveryAtLeast bound the pace of the sweep.
	sweepEveryAtMost  = time.Minute
	sweepEveryAtLeast = time.Second
	// The JSON-RPC codes (implementation-defined server errors) of the
	// proxy's own refusals.
	codeTooManySessions = -32000
	codeShuttingDown    = -32000
	codeNotYourSession  = -32001
)

// Observer hears what becomes of the proxy's client sessions (the
// metrics). Its methods are called with no lock held.
type Observer interface {
	// MCPSessions: open sessions are now n.
	MCPSessions(n int)
	// MCPSessionExpired: a session was closed for being idle.
	MCPSessionExpired()
	// MCPSessionRefused: a new session was refused at limit
	// (LimitPerPrincipal, LimitMax).
	MCPSessionRefused(limit string)
}

type noObserver struct{}

func (noObserver) MCPSessions(int)          {}
func (noObserver) MCPSessionExpired()       {}
func (noObserver) MCPSessionRefused(string) {}

// owner is who opened a session: a principal of a tenant, compared as a
// pair (a name may hold a "/", a tenant too).
type owner struct{ tenant, name string }

func ownerOf(p approval.Principal) owner { return owner{tenant: p.Tenant, name: p.Name} }

// userID is the owner as the SDK compares it (TokenInfo.UserID), one
// string per pair: the tenant's length first, so that no two pairs make
// the same string.
func (o owner) userID() string { return fmt.Sprintf("%d:%s/%s", len(o.tenant), o.tenant, o.name) }

// session is one open client session.
type session struct {
	ss       *mcp.ServerSession
	owner    owner
	inFlight int
	last     time.Time // when a request last began or ended
}

// registry is the proxy's open client sessions, of every server.
type registry struct {
	limits Sessions
	now    func() time.Time
	obs    Observer

	mu      sync.Mutex
	byID    map[string]*session
	byOwner map[owner]int
}

func newRegistry(limits Sessions, now func() time.Time, obs Observer) *registry {
	if limits.IdleTimeout <= 0 {
		limits.IdleTimeout = DefaultSessionIdle
	}
	if limits.PerPrincipal <= 0 {
		limits.PerPrincipal = DefaultPerPrincipal
	}
	if limits.Max <= 0 {
		limits.Max = DefaultMaxSessions
	}
	if now == nil {
		now = time.Now
	}
	if obs == nil {
		obs = noObserver{}
	}
	return &registry{limits: limits, now: now, obs: obs, byID: map[string]*session{}, byOwner: map[owner]int{}}
}

// admit takes in a session its client is initializing, or says which
// limit refuses it. Sessions idle past the timeout are closed first: a
// client at its limit that forgot some is not refused for them.
func (r *registry) admit(ss *mcp.ServerSession, o owner) (limit string) {
	r.expire()
	r.mu.Lock()
	switch {
	case r.byOwner[o] >= r.limits.PerPrincipal:
		limit = LimitPerPrincipal
	case len(r.byID) >= r.limits.Max:
		limit = LimitMax
	default:
		r.byID[ss.ID()] = &session{ss: ss, owner: o, last: r.now(), inFlight: 1}
		r.byOwner[o]++
	}
	n := len(r.byID)
	r.mu.Unlock()
	if limit != "" {
		r.obs.MCPSessionRefused(limit)
		return limit
	}
	r.obs.MCPSessions(n)
	go func() { _ = ss.Wait(); r.remove(ss.ID()) }() // a DELETE, the proxy's close, an expiry
	return ""
}

// remove forgets a session that ended; it reports whether it was open.
func (r *registry) remove(id string) bool {
	r.mu.Lock()
	s := r.byID[id]
	if s != nil {
		delete(r.byID, id)
		if r.byOwner[s.owner]--; r.byOwner[s.owner] <= 0 {
			delete(r.byOwner, s.owner)
		}
	}
	n := len(r.byID)
	r.mu.Unlock()
	if s != nil {
		r.obs.MCPSessions(n)
	}
	return s != nil
}

// begin and end bracket a request of session id: a session with a
// request in flight is never idle.
func (r *registry) begin(id string) { r.used(id, 1) }
func (r *registry) end(id string)   { r.used(id, -1) }

func (r *registry) used(id string, d int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.byID[id]; s != nil {
		s.inFlight += d
		s.last = r.now()
	}
}

// ownerOf is the owner of the open session id.
func (r *registry) ownerOf(id string) (owner, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.byID[id]
	if s == nil {
		return owner{}, false
	}
	return s.owner, true
}

// expire closes the sessions idle past the timeout.
func (r *registry) expire() {
	now := r.now()
	var idle []*session
	r.mu.Lock()
	for _, s := range r.byID {
		if s.inFlight == 0 && now.Sub(s.last) >= r.limits.IdleTimeout {
			idle = append(idle, s)
		}
	}
	r.mu.Unlock()
	for _, s := range idle {
		if r.remove(s.ss.ID()) {
			r.obs.MCPSessionExpired()
		}
		_ = s.ss.Close()
	}
}

// sweep expires idle sessions until ctx ends, at a pace of the timeout's
// (a quarter of it, between a second and a minute).
func (r *registry) sweep(ctx context.Context) {
	every := min(max(r.limits.IdleTimeout/4, sweepEveryAtLeast), sweepEveryAtMost)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.expire()
		}
	}
}

// tracked is the proxy's session middleware: an initialize is admitted
// (or refused, and the SDK closes the session it made for it), and
// every request of a session marks it in use while it runs.
func (p *Proxy) tracked(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if !ok || ss.ID() == "" {
			return next(ctx, method, req)
		}
		if method == "initialize" {
			pr, _ := principalOf(req.GetExtra())
			if limit := p.sessions.admit(ss, ownerOf(pr)); limit != "" {
				return nil, &jsonrpc.Error{Code: codeTooManySessions, Message: tooMany(limit, p.sessions.limits)}
			}
			defer p.sessions.end(ss.ID())
			res, err := next(ctx, method, req)
			if err != nil {
				_ = ss.Close()
			}
			return res, err
		}
		p.sessions.begin(ss.ID())
		defer p.sessions.end(ss.ID())
		return next(ctx, method, req)
	}
}

// tooMany is a refused session's message: which limit, and what to do.
func tooMany(limit string, l Sessions) string {
	if limit == LimitPerPrincipal {
		return fmt.Sprintf("too many MCP sessions open for this principal (%d, mcp_sessions.max_per_principal): "+
			"end one (DELETE) or let an idle one expire (%s)", l.PerPrincipal, l.IdleTimeout)
	}
	return fmt.Sprintf("too many MCP sessions open on this gateway (%d, mcp_sessions.max): try again later", l.Max)
}
