package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/dbtest"
)

// clientFrom is an HTTP client whose connections come from the local
// address ip (127.0.0.0/8 is the loopback: each address is another
// client to the gateway), with its own cookies.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:         func(ctx context.Context, n, a string) (net.Conn, error) { return d.DialContext(ctx, n, a) },
		MaxIdleConnsPerHost: 16}}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn posts token to the web page's sign-in form as c, and returns the
// status of the answer (after redirects) and the path it ended at.
func signIn(t *testing.T, c *http.Client, base, token string) (int, string) {
	resp, err := c.Get(base + "/ui/signin")
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csrf := csrfField.FindSubmatch(page)
	if csrf == nil {
		t.Errorf("no sign-in form: %d %s", resp.StatusCode, page)
		return 0, ""
	}
	req, _ := http.NewRequest("POST", base+"/ui/signin",
		strings.NewReader(url.Values{"token": {token}, "csrf": {string(csrf[1])}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	if resp, err = c.Do(req); err != nil {
		t.Error(err)
		return 0, ""
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Request.URL.Path
}

// bearer sends GET path with token as c, and returns the status.
func bearer(t *testing.T, c *http.Client, base, path, token string) int {
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestGuessingLocksNobodyOut: while guessers try tokens as fast as they
// can, on the web page's sign-in and on the APIs, from another address
// and from the approver's own (one NAT, one proxy), the approver signs
// in and uses the control API every time; past their budget the
// guessers' unknown tokens are answered 429.
func TestGuessingLocksNobodyOut(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, "")
	base := e.gw.URL
	var refused, tries atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		guesser := clientFrom([]string{"127.0.0.2", "127.0.0.1"}[g%2])
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				status := 0
				switch (g + i) % 3 {
				case 0:
					status, _ = signIn(t, guesser, base, "guess")
				case 1:
					status = bearer(t, guesser, base, "/_idem/v1/operations", "guess")
				default:
					status = bearer(t, guesser, base, "/v1/tickets/T-1", "guess")
				}
				tries.Add(1)
				if status == http.StatusTooManyRequests {
					refused.Add(1)
				}
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); refused.Load() < 20 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 16 {
		browser := clientFrom("127.0.0.1") // a sign-in from a fresh browser, each time
		if status, path := signIn(t, browser, base, "alice-token"); status != 200 || path == "/ui/signin" {
			t.Errorf("sign-in %d of the approver during the guessing: %d at %s", i, status, path)
		}
		if status := bearer(t, browser, base, "/_idem/v1/approvals?status=pending", "alice-token"); status != 200 {
			t.Errorf("the approver's API call %d during the guessing: %d", i, status)
		}
	}
	close(stop)
	wg.Wait()
	if refused.Load() < tries.Load()/2 {
		t.Fatalf("the guesser was refused %d times of %d", refused.Load(), tries.Load())
	}
	t.Logf("the guesser tried %d times, refused %d", tries.Load(), refused.Load())
}
