// Package client is the typed client of idemgate's control API
// (docs/design.md, "The web page"): operations, resolutions, approvals and
// their decisions, effects, and the audit log's checkpoint and export, as
// the principal a bearer token names. It imports only package contract,
// so a client (the CLI, an agent, a script's Go helper) links none of the
// server.
//
// A refusal is returned as the *contract.Problem the server answered; an
// answer that is not a problem is a *StatusError.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// MaxAnswer bounds an answer the client reads (an export is streamed, not
// read whole).
const MaxAnswer = 8 << 20

// Client calls one gateway's control API as one principal.
type Client struct {
	base   string // the gateway's URL and contract.ControlPrefix
	token  string
	hc     *http.Client
	header http.Header
}

// Option tunes a Client.
type Option func(*Client)

// WithHTTPClient sends the requests with hc (default: a client with a 30 s
// timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithHeader adds a header to every request (an agent names its run with
// contract.HeaderRun).
func WithHeader(name, value string) Option { return func(c *Client) { c.header.Set(name, value) } }

// New is a client of the gateway at gatewayURL (http:// or https://, a
// host, and the path the gateway is served under, if any), as the
// principal whose bearer token this is.
func New(gatewayURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(gatewayURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gateway %q: want http:// or https:// and a host", gatewayURL)
	}
	if token == "" {
		return nil, errors.New("no token: the control API needs a principal's bearer token")
	}
	c := &Client{base: strings.TrimRight(gatewayURL, "/") + contract.ControlPrefix, token: token,
		hc: &http.Client{Timeout: 30 * time.Second}, header: http.Header{}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// StatusError is an answer outside 2xx that is not a problem: a proxy's
// page, say. Text is its start, for a message.
type StatusError struct {
	Status int
	Text   string
}

func (e *StatusError) Error() string {
	if e.Text == "" {
		return fmt.Sprintf("the gateway answered %d", e.Status)
	}
	return fmt.Sprintf("the gateway answered %d: %s", e.Status, e.Text)
}

// IsNotFound reports whether err is the server's not_found: no such
// record in the caller's tenant.
func IsNotFound(err error) bool {
	var p *contract.Problem
	return errors.As(err, &p) && p.Code == contract.CodeNotFound
}

// do sends one request and decodes a 2xx answer into out (when out is not
// nil); it returns the answer's bytes.
func (c *Client) do(ctx context.Context, method, path string, in, out any) ([]byte, error) {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer))
	if err != nil {
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, refusal(resp, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("the gateway's answer: %w", err)
		}
	}
	return data, nil
}

// send sends one request, its body in as JSON, and returns the answer
// unread.
func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.sendRequest(req)
}

// sendRequest sends req as the client's principal, its answer unread.
func (c *Client) sendRequest(req *http.Request) (*http.Response, error) {
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("gateway unreachable: %w", err)
	}
	return resp, nil
}

// refusal is the error an answer outside 2xx carries.
func refusal(resp *http.Response, data []byte) error {
	if p, ok := contract.ReadProblem(resp.Header, data); ok && p.Code != "" {
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			p.RetryAfter = s
		}
		return &p
	}
	text := string(data)
	if len(text) > 200 {
		text = text[:200]
	}
	return &StatusError{Status: resp.StatusCode, Text: strings.TrimSpace(text)}
}

// page adds a page's parameters to q.
func page(q url.Values, after string, limit int) url.Values {
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}
