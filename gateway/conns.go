package gateway

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit serves at most max connections at once. When all are taken
// and another client connects, the connection idle the longest (a
// keep-alive one, between requests) is closed to make room for it: idle
// connections cost their holder nothing, so without this a few hundred
// sockets that each sent one request could keep everyone else out for the
// whole idle timeout. Connections in the middle of a request are never
// closed here; their deadlines bound them. With none idle, the newcomer
// waits, accepted but not yet read, until one ends or goes idle.
type connLimit struct {
	net.Listener
	slots    chan struct{}
	wentIdle chan struct{} // a connection went idle: one may be closed now
	done     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	idle     map[*limitedConn]time.Time // since when
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{Listener: ln, slots: make(chan struct{}, max), wentIdle: make(chan struct{}, 1),
		done: make(chan struct{}), idle: map[*limitedConn]time.Time{}}
}

// Accept takes the next connection, and a slot for it.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if !l.acquire() {
		c.Close()
		return nil, net.ErrClosed
	}
	return &limitedConn{Conn: c, l: l}, nil
}

// acquire waits for a slot, closing idle connections to free one.
func (l *connLimit) acquire() bool {
	for {
		select {
		case l.slots <- struct{}{}:
			return true
		default:
		}
		l.closeLongestIdle()
		select {
		case l.slots <- struct{}{}:
			return true
		case <-l.wentIdle:
		case <-l.done:
			return false
		}
	}
}

func (l *connLimit) closeLongestIdle() {
	l.mu.Lock()
	var oldest *limitedConn
	for c, since := range l.idle {
		if oldest == nil || since.Before(l.idle[oldest]) {
			oldest = c
		}
	}
	delete(l.idle, oldest)
	l.mu.Unlock()
	if oldest != nil {
		oldest.Close()
	}
}

// Close stops accepting: a caller waiting for a slot gives up.
func (l *connLimit) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// track is the http.Server's ConnState hook: it keeps the idle set.
func (l *connLimit) track(c net.Conn, state http.ConnState) {
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

// limitedConn gives its slot back once, when closed.
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.l.slots })
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
