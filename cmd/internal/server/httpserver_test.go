package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// served is a gateway behind its own Server (not httptest's), on a real
// socket, with settings added to the test configuration.
type served struct {
	*env
	addr   string
	client *http.Client
}

func serve(t *testing.T, settings string) *served {
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, settings)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := e.g.HTTPServer()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return &served{env: e, addr: ln.Addr().String(),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}}
}

// post sends a write to the served gateway, each on a connection of its own.
func (s *served) post(path, key string, headers ...string) (reply, error) {
	req, _ := http.NewRequest("POST", "http://"+s.addr+path, strings.NewReader(`{"title":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer agent-token")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, err
}

// stall opens a connection, sends prefix and nothing more, then reads
// until the server closes it; it reports how long that took, or an error
// if the server never closed it.
func stall(addr, prefix string) (time.Duration, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, prefix); err != nil {
		return 0, err
	}
	_ = conn.SetReadDeadline(start.Add(30 * time.Second))
	_, err = io.Copy(io.Discard, conn) // an answer (401, 408, 422) may come first
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, errors.New("the server never closed the connection")
	}
	return time.Since(start), nil // EOF or reset: closed by the server
}

const (
	slowDeadline = 500 * time.Millisecond
	slack        = 10 * time.Second // for a loaded machine, under -race
)

// TestSlowClientsAreCutWhileOthersAreServed: hundreds of connections that
// stall in their headers, in their bodies (with a bad token, or a good one
// and a key), or before sending anything, are all closed by the server
// within its deadlines, and legitimate requests are served meanwhile.
// Nothing a stalled client sent is reserved or forwarded.
func TestSlowClientsAreCutWhileOthersAreServed(t *testing.T) {
	// Every connection is the test's, one client: its own cap (which would
	// close the stalled ones past it at once) never binds, the deadlines do.
	s := serve(t, fmt.Sprintf("read_header_timeout: %s\nbody_timeout: %s\nmax_conns: 1000\nmax_conns_per_client: 1000\n",
		slowDeadline, slowDeadline))
	prefixes := []string{
		"POST /v1/tickets HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer agent-token\r\n",
		"POST /v1/tickets HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer guess\r\nContent-Length: 100\r\n\r\n{",
		"POST /v1/tickets HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer agent-token\r\nIdempotency-Key: stalled\r\n" +
			"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
		"",
	}
	const stalled = 400
	var wg sync.WaitGroup
	errs := make(chan error, stalled)
	for i := range stalled {
		wg.Go(func() {
			took, err := stall(s.addr, prefixes[i%len(prefixes)])
			if err == nil && took > 2*slowDeadline+slack { // headers, then body
				err = fmt.Errorf("closed after %s", took)
			}
			if err != nil {
				errs <- fmt.Errorf("stalled connection %d (%.20q): %w", i, prefixes[i%len(prefixes)], err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	served := 0
	for waiting := true; waiting; served++ {
		r, err := s.post("/v1/tickets", fmt.Sprintf("legit-%d", served))
		if err != nil || r.status != 201 {
			t.Fatalf("a legitimate request among stalled ones: %+v %v", r, err)
		}
		select {
		case <-done:
			waiting = false
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(errs)
	t.Logf("%d legitimate requests served while %d connections stalled", served, stalled)
	for err := range errs {
		t.Error(err)
	}
	_, err := s.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
		Key: "stalled"})
	if n := s.up.count("/v1/tickets"); n != served || !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("%d legitimate requests, %d effects; a stalled body's key: %v", served, n, err)
	}
}

// TestBodyDeadlineSparesWaitsAndSlowUpstreams: once the body is in, the
// body deadline no longer runs: a read whose upstream answers after it, a
// write that does, and a retry that waits (Prefer: wait) for that write
// are all answered.
func TestBodyDeadlineSparesWaitsAndSlowUpstreams(t *testing.T) {
	s := serve(t, "  - {match: POST /v1/sluggish, upstream: bare}\n  - {match: \"GET /v1/sluggish/{id}\", upstream: bare}\n"+
		"read_header_timeout: 100ms\nbody_timeout: 200ms\n")
	const hold = time.Second // more than three times the whole request's deadline
	sluggish := func(w http.ResponseWriter, r *http.Request) {
		s.up.effect(r)
		time.Sleep(hold)
		w.WriteHeader(201)
	}
	mux := s.up.srv.Config.Handler.(*http.ServeMux)
	mux.HandleFunc("POST /v1/sluggish", sluggish)
	mux.HandleFunc("GET /v1/sluggish/{id}", sluggish)
	req, _ := http.NewRequest("GET", "http://"+s.addr+"/v1/sluggish/1", nil)
	req.Header.Set("Authorization", "Bearer agent-token")
	resp, err := s.client.Do(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("a read answered after the body deadline: %v %v", resp, err)
	}
	resp.Body.Close()
	first := make(chan error, 1)
	go func() {
		r, err := s.post("/v1/sluggish", "sluggish-1")
		if err == nil && r.status != 201 {
			err = fmt.Errorf("%d %s", r.status, r.body)
		}
		first <- err
	}()
	for deadline := time.Now().Add(slack); s.up.count("/v1/sluggish") == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first write never reached the upstream: %v", <-first)
		}
	}
	r, err := s.post("/v1/sluggish", "sluggish-1", "Prefer", "wait=10")
	if err != nil || r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("a retry waiting past the body deadline: %+v %v", r, err)
	}
	if err := <-first; err != nil {
		t.Fatalf("a write answered after the body deadline: %v", err)
	}
}

// holdIdle opens a connection, has one request served on it, and keeps it
// open and idle (keep-alive); it returns the reader of what comes back.
func holdIdle(t *testing.T, addr string) *bufio.Reader {
	t.Helper()
	return holdIdleFrom(t, "127.0.0.1", addr)
}

// holdIdleFrom is holdIdle for the client at ip.
func holdIdleFrom(t *testing.T, ip, addr string) *bufio.Reader {
	t.Helper()
	conn := dialFrom(t, ip, addr)
	br := bufio.NewReader(conn)
	fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	return br
}

// closed reports whether the server closed the connection behind br.
func closed(br *bufio.Reader) bool {
	_, err := br.ReadByte()
	return err != nil
}

// TestIdleConnectionsMakeRoom: at max_conns, a newcomer is served at once
// by closing the connection idle the longest, so that sockets holding a
// keep-alive connection cannot keep everyone else out for the idle
// timeout; the other idle one is left alone.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	// Every connection is the test's, one client: its own cap never binds.
	s := serve(t, "max_conns: 2\nmax_conns_per_client: 3\nidle_timeout: 1h\n")
	older := holdIdle(t, s.addr)
	time.Sleep(10 * time.Millisecond)
	newer := holdIdle(t, s.addr)
	s.client.Timeout = slack
	resp, err := s.client.Get("http://" + s.addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a newcomer at the cap, with idle connections held: %v %v", resp, err)
	}
	resp.Body.Close()
	if !closed(older) {
		t.Fatal("the connection idle the longest is still open")
	}
	newerClosed := make(chan bool, 1)
	go func() { newerClosed <- closed(newer) }()
	select {
	case <-newerClosed:
		t.Fatal("both idle connections were closed for one newcomer")
	case <-time.After(200 * time.Millisecond):
	}
}

// TestConnectionsAreCapped: at max_conns with every connection in the
// middle of a request (stalled in its headers), a newcomer waits until the
// header deadline frees one, and is then served.
func TestConnectionsAreCapped(t *testing.T) {
	// Every connection is the test's, one client: its own cap never binds.
	s := serve(t, fmt.Sprintf("max_conns: 2\nmax_conns_per_client: 3\nread_header_timeout: %s\n", slowDeadline))
	stalled := make(chan error, 2)
	for range 2 {
		go func() { _, err := stall(s.addr, "GET /healthz HTTP/1.1\r\nHost: gw\r\n"); stalled <- err }()
	}
	time.Sleep(slowDeadline / 5) // both are accepted, and stalled
	start := time.Now()
	s.client.Timeout = slack
	resp, err := s.client.Get("http://" + s.addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a newcomer once a stalled connection was cut: %v %v", resp, err)
	}
	resp.Body.Close()
	if took := time.Since(start); took < slowDeadline/2 {
		t.Fatalf("a newcomer was served %s after two stalled connections took every slot", took)
	}
	for range 2 {
		if err := <-stalled; err != nil {
			t.Fatal(err)
		}
	}
}

// dialFrom connects to addr from the local address ip: each address of
// 127/8 is this machine, and another client to the gateway.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: slack}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// open reports whether conn is still open: nothing comes back, not even
// its close, for a moment.
func open(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := conn.Read(make([]byte, 1))
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// TestOneClientCannotHoldEverySlot (issue 24, 7.16): a client that opens
// many connections and stalls in each holds max_conns_per_client of them
// (a quarter of max_conns by default); the others are closed as they come,
// and another client is served at once.
func TestOneClientCannotHoldEverySlot(t *testing.T) {
	s := serve(t, "max_conns: 8\nread_header_timeout: 1h\n")
	var held []net.Conn
	for range 20 {
		conn := dialFrom(t, "127.0.0.2", s.addr)
		fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: gw\r\n")
		held = append(held, conn)
	}
	s.client.Timeout = 3 * time.Second // the stalled ones would hold it for an hour
	resp, err := s.client.Get("http://" + s.addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("another client, while one stalls in 20 connections: %v %v", resp, err)
	}
	resp.Body.Close()
	n := 0
	for _, conn := range held {
		if open(conn) {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("the stalling client holds %d connections, want 2 of 8", n)
	}
}

// TestAClientsIdleConnectionMakesRoomForIt: at its own cap, a client's
// newcomer is served by closing that client's connection idle the longest,
// never another client's.
func TestAClientsIdleConnectionMakesRoomForIt(t *testing.T) {
	s := serve(t, "max_conns: 8\nmax_conns_per_client: 2\nidle_timeout: 1h\n")
	other := holdIdle(t, s.addr) // 127.0.0.1
	var idle []*bufio.Reader
	for range 2 {
		idle = append(idle, holdIdleFrom(t, "127.0.0.3", s.addr))
		time.Sleep(10 * time.Millisecond)
	}
	third := dialFrom(t, "127.0.0.3", s.addr)
	fmt.Fprint(third, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
	_ = third.SetReadDeadline(time.Now().Add(slack))
	if resp, err := http.ReadResponse(bufio.NewReader(third), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a third connection at the client's cap, two idle: %v %v", resp, err)
	}
	if !closed(idle[0]) {
		t.Fatal("the client's connection idle the longest is still open")
	}
	stillOpen := make(chan bool, 2)
	go func() { stillOpen <- !closed(idle[1]) }()
	go func() { stillOpen <- !closed(other) }()
	select {
	case <-stillOpen:
		t.Fatal("another idle connection was closed for the newcomer")
	case <-time.After(200 * time.Millisecond):
	}
}

// TestRefusalsDoNotWaitForTheBody: a request refused before its body is
// read (a bad token) is answered at once, on a connection then closed,
// however slowly its body comes: the server does not first read what is
// left of it, until the body deadline.
func TestRefusalsDoNotWaitForTheBody(t *testing.T) {
	s := serve(t, "body_timeout: 1h\n")
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/tickets HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer guess\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	_ = conn.SetReadDeadline(time.Now().Add(slack))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 401 || !resp.Close {
		t.Fatalf("a refusal with most of the body still to come: %+v %v", resp, err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if !closed(br) {
		t.Fatal("the connection stayed open after the refusal")
	}
}

// TestARefusedBodyCanReadItsRefusal (issue 34): a client that writes its
// whole body before it reads, as simple clients do, and is refused before
// the gateway reads it (a bad token), still reads the 401: the gateway's
// close lingers, reading and throwing away what still comes, instead of
// resetting the connection under the client's write (a broken pipe, and
// the answer lost with it). 32 MiB is more than the sockets' buffers hold,
// so the client is still writing when the gateway has answered.
func TestARefusedBodyCanReadItsRefusal(t *testing.T) {
	t.Parallel()
	s := serve(t, "body_timeout: 1h\n")
	conn, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const size = 32 << 20
	fmt.Fprintf(conn, "POST /v1/tickets HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer guess\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
	_ = conn.SetDeadline(time.Now().Add(time.Minute)) // a bound for a stuck test, not a window
	if _, err := conn.Write(make([]byte, size)); err != nil {
		t.Fatalf("writing the body after the refusal: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 401 {
		t.Fatalf("the refusal: %+v %v", resp, err)
	}
}

// TestHeadersAreBounded: headers past max_header_bytes are 431 and go no
// further.
func TestHeadersAreBounded(t *testing.T) {
	s := serve(t, "max_header_bytes: 4KiB\n")
	// (The server may reset the connection once it has answered.)
	r, _ := s.post("/v1/tickets", "big", "X-Padding", strings.Repeat("p", 32<<10))
	if r.status != http.StatusRequestHeaderFieldsTooLarge || s.up.count("/v1/tickets") != 0 {
		t.Fatalf("32KiB of headers: %+v", r)
	}
	if r, err := s.post("/v1/tickets", "small"); err != nil || r.status != 201 {
		t.Fatalf("a request of ordinary size: %+v %v", r, err)
	}
}
