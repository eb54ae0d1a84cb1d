package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// A lingering close, as nginx's lingering_close: a connection the server
// closes after an early answer (a 413 or a 401 before the request's body
// was read) is half-closed first, and what the client still sends is read
// and thrown away, for a bounded time and size, before it is closed. A
// client still writing its body would otherwise find the connection reset
// under it (unread data makes the kernel send a reset, not a FIN): a broken
// pipe instead of the answer that says why, and the reset can take the
// answer out of its receive buffer too.
const (
	lingerTime  = 10 * time.Second // in all
	lingerIdle  = 2 * time.Second  // between two reads: a client that stopped sending
	lingerBytes = 64 << 20
)

// connKey finds, in a request's context, the connection it came on.
type connKey struct{}

// withConn is the server's ConnContext: it keeps c for lingerAfter.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// lingerAfter marks the connection of a request's context (ctx) to linger
// when the server closes it.
func lingerAfter(ctx context.Context) {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		lc.linger.Store(true)
	}
}

// drain half-closes c and reads what the client still sends until it
// stops (lingerIdle), or for lingerTime, or lingerBytes.
func (c *limitedConn) drain() {
	_ = c.CloseWrite()
	end := time.Now().Add(lingerTime)
	buf := make([]byte, 32<<10)
	for read := 0; read < lingerBytes; {
		next := time.Now().Add(lingerIdle)
		if next.After(end) {
			next = end
		}
		_ = c.Conn.SetReadDeadline(next)
		n, err := c.Conn.Read(buf)
		read += n
		if err != nil {
			return
		}
	}
}
