package gateway_test

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
	store, dsn := stores["sqlite"](t)
	e := newEnv(t, store, dsn, settings)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := e.g.NewServer()
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
	s := serve(t, fmt.Sprintf("read_header_timeout: %s\nbody_timeout: %s\nmax_conns: 1000\n", slowDeadline, slowDeadline))
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
	_, err := s.store.GetByKey(context.Background(), "acme", "stalled")
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

// TestConnectionsAreCapped: past max_conns, a new connection waits until
// one of those served ends (here, two idle ones, at their idle timeout).
func TestConnectionsAreCapped(t *testing.T) {
	const idle = time.Second
	s := serve(t, fmt.Sprintf("max_conns: 2\nidle_timeout: %s\n", idle))
	var held []*bufio.Reader
	var heldSince time.Time // the first idle connection's timeout runs from about then
	for range 2 {
		conn, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n") // served: then idle, and held
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		resp.Body.Close()
		if held = append(held, br); len(held) == 1 {
			heldSince = time.Now()
		}
	}
	resp, err := s.client.Get("http://" + s.addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the third connection, once one is free: %v %v", resp, err)
	}
	resp.Body.Close()
	if took := time.Since(heldSince); took < idle/2 {
		t.Fatalf("a third connection was served %s after two were held idle", took)
	}
	for _, br := range held {
		if _, err := br.ReadByte(); err == nil {
			t.Fatal("an idle connection was sent something")
		}
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
