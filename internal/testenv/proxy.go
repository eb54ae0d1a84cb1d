package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a real server, whose
// connections a test can cut at any moment: a connection lost in the
// middle of a statement, as a network or a crashed server would lose it.
type Proxy struct {
	Addr    string // host:port to dial instead of the server's
	ln      net.Listener
	target  string
	mu      sync.Mutex
	conns   []net.Conn
	blocked bool
	silent  atomic.Bool  // Silence: every byte swallowed, nothing closed
	down    atomic.Int64 // bytes the server sent that were passed on
}

// NewProxy starts a proxy to target (host:port), closed at the test's end.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, target: target}
	go p.accept()
	tb.Cleanup(func() { ln.Close(); p.Cut() })
	return p
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		blocked := p.blocked
		p.mu.Unlock()
		if blocked {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(c, s, &p.down)
		go p.pipe(s, c, nil)
	}
}

// pipe copies src to dst, or swallows it while the proxy is silent,
// adding what it passed on to count if given.
func (p *Proxy) pipe(dst, src net.Conn, count *atomic.Int64) {
	defer func() { dst.Close(); src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.silent.Load() {
			w, werr := dst.Write(buf[:n])
			if count != nil {
				count.Add(int64(w))
			}
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Silence makes the server stop answering, as a host that hangs or a
// network that drops every packet: the connections stay open, and what
// is sent either way (on new connections too) is swallowed. Nothing ends
// it but the test's end.
func (p *Proxy) Silence() { p.silent.Store(true) }

// Cut closes every connection open now, both ways; new ones still work.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Down cuts every connection and refuses new ones, as a server that has
// gone away; Up lets them through again.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.blocked = true
	p.mu.Unlock()
	p.Cut()
}

// FromServer is how many bytes the server sent that the proxy passed on
// to its clients: what a client could have read, at most.
func (p *Proxy) FromServer() int64 { return p.down.Load() }

// Up ends Down.
func (p *Proxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = false
}
