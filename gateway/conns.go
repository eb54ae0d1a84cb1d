package gateway

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// connLimit serves at most max connections at once, and at most
// perClient of them for one client (an address, or an IPv6 /64). When all
// are taken and another client connects, the connection idle the longest
// (a keep-alive one, between requests) is closed to make room for it: idle
// connections cost their holder nothing, so without this a few hundred
// sockets that each sent one request could keep everyone else out for the
// whole idle timeout. Connections in the middle of a request are never
// closed here; their deadlines bound them. With none idle, the newcomer
// waits, accepted but not yet read, until one ends or goes idle. A client
// at its own cap makes room the same way among its own connections only;
// with none of them idle, its newcomer is closed at once: waiting would
// hold up every other client's, and one client stalling in thousands of
// connections must not take the slots the others are served in.
type connLimit struct {
	net.Listener
	perClient int
	slots     chan struct{}
	wentIdle  chan struct{} // a connection went idle: one may be closed now
	done      chan struct{}
	once      sync.Once
	mu        sync.Mutex
	idle      map[*limitedConn]time.Time // since when
	clients   map[netip.Prefix]int       // connections held, by client
}

func newConnLimit(ln net.Listener, max, perClient int) *connLimit {
	return &connLimit{Listener: ln, perClient: perClient, slots: make(chan struct{}, max),
		wentIdle: make(chan struct{}, 1), done: make(chan struct{}), idle: map[*limitedConn]time.Time{},
		clients: map[netip.Prefix]int{}}
}

// Accept takes the next connection whose client is under its cap, and a
// slot for it.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := clientOf(c.RemoteAddr())
		if !l.admit(client) {
			c.Close()
			continue
		}
		if !l.acquire() {
			l.leave(client)
			c.Close()
			return nil, net.ErrClosed
		}
		return &limitedConn{Conn: c, l: l, client: client}, nil
	}
}

// clientOf is who a connection comes from, as the cap counts: its address,
// or its IPv6 /64 (one host's share, as a provider hands them out); no
// client (uncapped) for other than TCP.
func clientOf(addr net.Addr) netip.Prefix {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	a := tcp.AddrPort().Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// admit counts a connection for client, closing the client's own
// connection idle the longest if it is at its cap; false when none is.
func (l *connLimit) admit(client netip.Prefix) bool {
	if !client.IsValid() {
		return true
	}
	for {
		l.mu.Lock()
		if l.clients[client] < l.perClient {
			l.clients[client]++
			l.mu.Unlock()
			return true
		}
		oldest := l.takeLongestIdle(func(c *limitedConn) bool { return c.client == client })
		l.mu.Unlock()
		if oldest == nil {
			return false
		}
		oldest.Close() // gives its count back
	}
}

// leave gives back a connection client held.
func (l *connLimit) leave(client netip.Prefix) {
	if !client.IsValid() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.clients[client]--; l.clients[client] <= 0 {
		delete(l.clients, client)
	}
}

// acquire waits for a slot, closing idle connections to free one.
func (l *connLimit) acquire() bool {
	for {
		select {
		case l.slots <- struct{}{}:
			return true
		default:
		}
		l.mu.Lock()
		oldest := l.takeLongestIdle(func(*limitedConn) bool { return true })
		l.mu.Unlock()
		if oldest != nil {
			oldest.Close()
		}
		select {
		case l.slots <- struct{}{}:
			return true
		case <-l.wentIdle:
		case <-l.done:
			return false
		}
	}
}

// takeLongestIdle removes from the idle set, and returns, the connection
// idle the longest of those match accepts (nil for none). l.mu is held.
func (l *connLimit) takeLongestIdle(match func(*limitedConn) bool) *limitedConn {
	var oldest *limitedConn
	for c, since := range l.idle {
		if match(c) && (oldest == nil || since.Before(l.idle[oldest])) {
			oldest = c
		}
	}
	delete(l.idle, oldest)
	return oldest
}

// Close stops accepting: a caller waiting for a slot gives up.
func (l *connLimit) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// track is the http.Server's ConnState hook: it keeps the idle set.
func (l *connLimit) track(c net.Conn, state http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if state != http.StateIdle {
		delete(l.idle, lc)
		return
	}
	l.idle[lc] = time.Now()
	select {
	case l.wentIdle <- struct{}{}:
	default:
	}
}

// limitedConn gives its slot, and its client's count, back once, when
// closed.
type limitedConn struct {
	net.Conn
	l      *connLimit
	client netip.Prefix
	once   sync.Once
	linger atomic.Bool // drain before closing (linger.go)
}

func (c *limitedConn) Close() error {
	if c.linger.CompareAndSwap(true, false) {
		c.drain()
	}
	err := c.Conn.Close()
	c.once.Do(func() {
		<-c.l.slots
		c.l.leave(c.client)
	})
	return err
}

// CloseWrite lets the server half-close the connection after its last
// answer (a lingering close), as it does on a bare TCP connection.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
