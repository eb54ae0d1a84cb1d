package limits

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Failures limits failed authentications (an unknown token) per client:
// an IPv4 address, or an IPv6 /64 (a host or a site takes as many
// addresses of its /64 as it likes). Past its budget a client's unknown
// tokens are answered 429 with the wait, and logged no more one by one.
// It never refuses a known token: the caller checks the token first, so
// that what others fail from the same address (behind one NAT or proxy)
// locks nobody out. The web page's sign-in and the APIs' bearer tokens
// share one Failures, so that neither face doubles a guesser's budget.
type Failures struct {
	every time.Duration // one failure forgiven per every
	burst int           // failures allowed at once
	max   int           // clients tracked at most
	now   func() time.Time

	mu      sync.Mutex
	clients map[netip.Prefix]*rate.Limiter
	pruned  time.Time
}

// maxClients bounds the clients tracked: past it, those forgiven already
// are dropped, and then any.
const maxClients = 16384

// NewFailures allows each client burst failed attempts at once, then one
// per every.
func NewFailures(every time.Duration, burst int) *Failures {
	return &Failures{every: every, burst: max(burst, 1), max: maxClients, now: time.Now,
		clients: map[netip.Prefix]*rate.Limiter{}}
}

// client is the network a remote address (http.Request.RemoteAddr)
// counts under; false when it is no IP address (a Unix socket), whose
// callers are not told apart.
func client(remote string) (netip.Prefix, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}, false
	}
	a = a.Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p, true
}

// Fail counts a failed attempt of the client, and reports whether it was
// within the client's budget; past it, how long until it is again.
func (f *Failures) Fail(remote string) (time.Duration, bool) {
	c, ok := client(remote)
	if !ok {
		return 0, true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.clients[c]
	if l == nil {
		if len(f.clients) >= f.max {
			f.prune()
		}
		l = rate.NewLimiter(rate.Every(f.every), f.burst)
		f.clients[c] = l
	}
	now := f.now()
	if l.AllowN(now, 1) {
		return 0, true
	}
	return time.Duration((1 - l.TokensAt(now)) * float64(f.every)), false
}

// prune makes room for a client: it drops the clients whose failures are
// all forgiven (a scan at most once a second, so that a guesser with many
// addresses cannot make every failure scan the table), and then, if the
// table is still full, one client at random. The caller holds mu.
func (f *Failures) prune() {
	now := f.now()
	if now.Sub(f.pruned) >= time.Second {
		f.pruned = now
		for c, l := range f.clients {
			if l.TokensAt(now) >= float64(f.burst) {
				delete(f.clients, c)
			}
		}
	}
	for c := range f.clients {
		if len(f.clients) < f.max {
			break
		}
		delete(f.clients, c)
	}
}

// size is how many clients are tracked.
func (f *Failures) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.clients)
}
