package webui_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// client is a person's browser without the browser: a cookie jar that
// follows no redirect, for the tests of what the server answers.
type client struct {
	t    *testing.T
	fx   *fixture
	hc   *http.Client
	csrf string // the session's form token, read from a page
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// anonymous is a client with no session.
func (fx *fixture) anonymous(t *testing.T) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, fx: fx, hc: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// signIn signs who in through the form, and reads the session's token.
func (fx *fixture) signIn(t *testing.T, who string) *client {
	t.Helper()
	c := fx.anonymous(t)
	if r := c.signIn(fx.tokens[who], ""); r.status != http.StatusSeeOther {
		t.Fatalf("sign in %s: %d %s", who, r.status, r.body)
	}
	page := c.get("/ui/operations")
	m := csrfField.FindStringSubmatch(page.body)
	if page.status != http.StatusOK || m == nil {
		t.Fatalf("after sign-in: %d %s", page.status, page.body)
	}
	c.csrf = m[1]
	return c
}

// signIn posts the sign-in form with token.
func (c *client) signIn(token, next string) reply {
	c.t.Helper()
	form := c.get("/ui/signin?next=" + url.QueryEscape(next))
	m := csrfField.FindStringSubmatch(form.body)
	if m == nil {
		c.t.Fatalf("sign-in form: %d %s", form.status, form.body)
	}
	return c.post("/ui/signin", url.Values{"csrf": {m[1]}, "token": {token}, "next": {next}})
}

func (c *client) get(path string) reply {
	c.t.Helper()
	return c.do("GET", path, nil)
}

// post sends form, and the extra headers given as name, value pairs.
func (c *client) post(path string, form url.Values, headers ...string) reply {
	c.t.Helper()
	return c.do("POST", path, form, headers...)
}

func (c *client) do(method, path string, form url.Values, headers ...string) reply {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, c.fx.srv.URL+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// decision is a decision's form for approval a, with the session's token.
func (c *client) decision(verb, fingerprint string) url.Values {
	return url.Values{"csrf": {c.csrf}, "decision": {verb}, "fingerprint": {fingerprint}, "note": {"checked"}}
}
