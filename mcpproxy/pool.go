package mcpproxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/approval"
)

// An isolated server gives each tenant (or principal) an upstream of its
// own: a stdio server's process, an HTTP server's session. State one
// tenant leaves in a stateful server is never read by another. The
// proxy's own upstream (proxied.up) only lists the tools; calls go to
// the caller's, started on its first call.
const (
	// maxIsolated bounds the upstreams one server keeps: past it, the
	// least recently used idle one is stopped, and with none idle a call
	// is refused before anything is sent.
	maxIsolated = 64
	// isolatedIdle is how long an isolated upstream with no call in
	// flight is kept before it is stopped, unless Server.IsolatedIdle says.
	isolatedIdle = 10 * time.Minute
)

// pool is a server's isolated upstreams, by isolation key.
type pool struct {
	ps      *proxied
	ctx     context.Context // the proxy's: its end stops them all
	idle    time.Duration
	mu      sync.Mutex
	members map[string]*member
	starts  int // sessions of members since stopped
}

// member is one isolated upstream.
type member struct {
	up       *upstream
	stop     context.CancelFunc
	inFlight int
	last     time.Time
}

// isolationKey is whose upstream a principal's calls use: "" is the
// shared one.
func (ps *proxied) isolationKey(pr approval.Principal) string {
	switch ps.cfg.Isolation {
	case "shared":
		return ""
	case "principal":
		return pr.Tenant + "\x00" + pr.Name
	}
	return pr.Tenant
}

// call sends a call on the upstream of pr's isolation key.
func (ps *proxied) call(ctx context.Context, pr approval.Principal, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	key := ps.isolationKey(pr)
	if key == "" {
		return ps.up.call(ctx, p)
	}
	up, err := ps.pool.take(key)
	if err != nil {
		return nil, err
	}
	defer ps.pool.give(key)
	return up.call(ctx, p)
}

// take is key's upstream, started if it has none, held until give.
func (pl *pool) take(key string) (*upstream, error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	m, err := pl.memberLocked(key)
	if err != nil {
		return nil, err
	}
	m.inFlight++
	return m.up, nil
}

// warm starts key's upstream if it has none (and room), for its calls
// to come.
func (pl *pool) warm(key string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	_, _ = pl.memberLocked(key)
}

// memberLocked is key's member, started if it has none, marked used now.
func (pl *pool) memberLocked(key string) (*member, error) {
	m := pl.members[key]
	if m == nil {
		if len(pl.members) >= maxIsolated && !pl.evictLocked() {
			return nil, fmt.Errorf("%w: %d isolated sessions are busy, the most one server keeps", errNotSent, maxIsolated)
		}
		m = pl.startLocked()
		pl.members[key] = m
	}
	m.last = time.Now()
	return m, nil
}

// give ends a call that take began.
func (pl *pool) give(key string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if m := pl.members[key]; m != nil {
		m.inFlight--
		m.last = time.Now()
	}
}

// startLocked starts an upstream of the server, kept up until stopped.
func (pl *pool) startLocked() *member {
	ps := pl.ps
	up := newUpstream(ps.cfg, ps.p.opts.Logger, ps.refresh)
	up.connected = func(context.Context, *mcp.ClientSession) error { return nil }
	ctx, stop := context.WithCancel(pl.ctx)
	ps.p.wg.Add(1)
	go func() { defer ps.p.wg.Done(); up.run(ctx) }()
	return &member{up: up, stop: stop}
}

// evictLocked stops the least recently used idle member, if there is one.
func (pl *pool) evictLocked() bool {
	var oldest string
	for k, m := range pl.members {
		if m.inFlight == 0 && (oldest == "" || m.last.Before(pl.members[oldest].last)) {
			oldest = k
		}
	}
	if oldest == "" {
		return false
	}
	pl.stopLocked(oldest)
	return true
}

func (pl *pool) stopLocked(key string) {
	m := pl.members[key]
	pl.starts += m.up.Started()
	m.stop()
	delete(pl.members, key)
}

// sweep stops, until ctx ends, each member idle for longer than idle.
func (pl *pool) sweep() {
	t := time.NewTicker(pl.idle / 4)
	defer t.Stop()
	for {
		select {
		case <-pl.ctx.Done():
			return
		case now := <-t.C:
			pl.mu.Lock()
			for k, m := range pl.members {
				if m.inFlight == 0 && now.Sub(m.last) > pl.idle {
					pl.stopLocked(k)
				}
			}
			pl.mu.Unlock()
		}
	}
}

// started is how many sessions the members have had.
func (pl *pool) started() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	n := pl.starts
	for _, m := range pl.members {
		n += m.up.Started()
	}
	return n
}

// running is how many isolated upstreams are up now.
func (pl *pool) running() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return len(pl.members)
}
