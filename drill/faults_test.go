package drill

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// target is a write endpoint that counts the effects it applied, and
// when it applied the last one.
type testTarget struct {
	srv     *httptest.Server
	effects atomic.Int64
	last    atomic.Int64 // unix nanoseconds of the last effect
}

func newTarget(t *testing.T) *testTarget {
	tt := &testTarget{}
	tt.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := tt.effects.Add(1)
		tt.last.Store(time.Now().UnixNano())
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"n":%d,"got":%q,"path":%q}`, n, body, r.URL.Path)
	}))
	t.Cleanup(tt.srv.Close)
	return tt
}

// through sends one write through p, as the drill does.
func through(t *testing.T, p *Proxy) func() (*http.Response, string, error) {
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return func() (*http.Response, string, error) {
		resp, err := client.Post(front.URL+"/v1/tickets", "application/json", strings.NewReader(`x`))
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
}

// TestFaults: each fault does what it says, on its own, judged by what the
// target applied and what the client saw.
func TestFaults(t *testing.T) {
	cases := []struct {
		fault   Fault
		applied int64 // effects at the target once the client has its answer
		cut     bool  // the client saw the connection cut
		status  int   // else the status it got
		retry   string
		counts  Counts
	}{
		{Fault{}, 1, false, 201, "", Counts{1, 1, 0}},
		{Fault{Kind: LostResponse}, 1, true, 0, "", Counts{1, 1, 1}},
		{Fault{Kind: Reset}, 0, true, 0, "", Counts{1, 0, 1}},
		{Fault{Kind: Status, Status: 429, RetryAfter: 2}, 0, false, 429, "2", Counts{1, 0, 0}},
		{Fault{Kind: Status, Status: 503, RetryAfter: 1}, 0, false, 503, "1", Counts{1, 0, 0}},
		{Fault{Kind: Status, Status: 500}, 0, false, 500, "", Counts{1, 0, 0}},
		{Fault{Kind: Replaced, Status: 500}, 1, false, 500, "", Counts{1, 1, 0}},
		{Fault{Kind: Delay, Delay: 150 * time.Millisecond}, 1, false, 201, "", Counts{1, 1, 0}},
	}
	for _, c := range cases {
		t.Run(cmp.Or(string(c.fault.Kind), "pass"), func(t *testing.T) {
			tgt := newTarget(t)
			p, err := NewProxy(tgt.srv.URL + "/base")
			must(t, err)
			send := through(t, p)
			must(t, p.Next(c.fault))
			began := time.Now()
			resp, body, err := send()
			switch {
			case c.cut && err == nil:
				t.Fatalf("the client got an answer: %d %s", resp.StatusCode, body)
			case !c.cut && (err != nil || resp.StatusCode != c.status || resp.Header.Get("Retry-After") != c.retry):
				t.Fatalf("want %d (Retry-After %q), got %v %v %s", c.status, c.retry, resp, err, body)
			case c.status == 201 && !strings.Contains(body, `"path":"/base/v1/tickets"`):
				t.Fatalf("not forwarded to the base path: %s", body)
			}
			if got := tgt.effects.Load(); got != c.applied {
				t.Fatalf("the target applied %d, want %d", got, c.applied)
			}
			if c.fault.Kind == Delay && time.Unix(0, tgt.last.Load()).Sub(began) < c.fault.Delay {
				t.Fatalf("delivered %v after the send, before the delay", time.Unix(0, tgt.last.Load()).Sub(began))
			}
			must(t, p.Idle(context.Background()))
			if got := p.Counts(); got != c.counts {
				t.Fatalf("counts %+v, want %+v", got, c.counts)
			}
		})
	}
}

// TestHeldOutlivesTheClient: a client that gives up on a held request
// does not stop it: once released, the target applies it late, and Idle
// waits for it. The client gives up once the proxy holds its request (an
// event), not after a time. The target applies it only while its own
// request is still wanted, as a target whose transaction runs under its
// request's context does: the late request must not be cancelled on the
// way because its client has gone (ReverseProxy cancels it then when the
// writer it is given can say the client went away).
func TestHeldOutlivesTheClient(t *testing.T) {
	tgt := &testTarget{}
	arrived, proceed := make(chan struct{}), make(chan struct{})
	tgt.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		close(arrived)
		select {
		case <-r.Context().Done(): // the proxy gave up on it: nothing applied
			return
		case <-proceed:
		}
		tgt.effects.Add(1)
		w.WriteHeader(201)
	}))
	t.Cleanup(tgt.srv.Close)
	p, err := NewProxy(tgt.srv.URL)
	must(t, err)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	must(t, p.Next(Fault{Kind: Hold}))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", front.URL+"/w", strings.NewReader(`x`))
		_, err := http.DefaultClient.Do(req)
		errc <- err
	}()
	for p.Counts().Requests == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the client should have given up")
	}
	if n := tgt.effects.Load(); n != 0 {
		t.Fatalf("the target applied %d before the release", n)
	}
	p.Release()
	<-arrived
	close(proceed)
	must(t, p.Idle(context.Background()))
	if n := tgt.effects.Load(); n != 1 {
		t.Fatalf("the target applied %d, want the late one", n)
	}
}

func TestBadFaults(t *testing.T) {
	p, err := NewProxy("http://127.0.0.1:1")
	must(t, err)
	for _, bad := range []Fault{{Kind: Status, Status: 200}, {Kind: Replaced}, {Kind: Delay}, {Kind: "explode"}} {
		if err := p.Next(bad); err == nil {
			t.Errorf("%+v queued", bad)
		}
	}
	if _, err := NewProxy("ftp://x"); err == nil {
		t.Error("a target that is not http(s)")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
