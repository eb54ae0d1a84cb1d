package drill

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// target is a write endpoint that counts the effects it applied.
func target(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var effects atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := effects.Add(1)
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"n":`+string(rune('0'+n))+`,"got":"`+string(body)+`","path":"`+r.URL.Path+`"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &effects
}

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
	srv, effects := target(t)
	p, err := NewProxy(srv.URL + "/base")
	if err != nil {
		t.Fatal(err)
	}
	send := through(t, p)

	resp, body, err := send() // no fault: passes through, to the base path
	if err != nil || resp.StatusCode != 201 || !strings.Contains(body, `"path":"/base/v1/tickets"`) || effects.Load() != 1 {
		t.Fatalf("pass: %v %v %s", resp, err, body)
	}
	must(t, p.Next(Fault{Kind: LostResponse}))
	if _, _, err := send(); err == nil || effects.Load() != 2 {
		t.Fatalf("lost response: the client got an answer (%v), or the target did not apply it (%d)", err, effects.Load())
	}
	must(t, p.Next(Fault{Kind: Reset}))
	if _, _, err := send(); err == nil || effects.Load() != 2 {
		t.Fatalf("reset: the client got an answer (%v), or the target applied it (%d)", err, effects.Load())
	}
	must(t, p.Next(Fault{Kind: Status, Status: 429, RetryAfter: 2}))
	resp, _, err = send()
	if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || effects.Load() != 2 {
		t.Fatalf("429: %v %v, target %d", resp, err, effects.Load())
	}
	must(t, p.Next(Fault{Kind: Status, Status: 503}))
	if resp, _, _ = send(); resp.StatusCode != 503 || effects.Load() != 2 {
		t.Fatalf("503: %v", resp)
	}
	must(t, p.Next(Fault{Kind: Delay, Delay: 150 * time.Millisecond}))
	began := time.Now()
	if resp, _, err = send(); err != nil || resp.StatusCode != 201 || time.Since(began) < 150*time.Millisecond ||
		effects.Load() != 3 {
		t.Fatalf("delay: %v %v after %v", resp, err, time.Since(began))
	}
	if c := p.Counts(); c != (Counts{Requests: 6, Forwarded: 3, Cut: 2}) {
		t.Fatalf("counts %+v", c)
	}
	for _, bad := range []Fault{{Kind: Status, Status: 200}, {Kind: Delay}, {Kind: "explode"}} {
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
