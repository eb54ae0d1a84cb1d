package httpidem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/http"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// capture holds the handler's response until its outcome is recorded. A
// response larger than max, or one the handler flushes, is streamed
// instead, its size and digest kept (keyed.Outcome.Streamed).
type capture struct {
	w        http.ResponseWriter
	header   http.Header
	status   int
	buf      bytes.Buffer
	max      int64
	streamed bool
	size     int64
	sum      hash.Hash
}

func newCapture(w http.ResponseWriter, max int64) *capture {
	return &capture{w: w, header: http.Header{}, max: max}
}

func (c *capture) Header() http.Header { return c.header }

func (c *capture) WriteHeader(status int) {
	if c.status == 0 && status >= 200 {
		c.status = status
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.streamed && int64(c.buf.Len()+len(p)) > c.max {
		c.stream()
	}
	if c.streamed {
		c.size += int64(len(p))
		c.sum.Write(p)
		return c.w.Write(p)
	}
	return c.buf.Write(p)
}

// Flush gives up capturing: a handler that streams cannot be replayed.
func (c *capture) Flush() {
	if !c.streamed {
		c.stream()
	}
	if f, ok := c.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (c *capture) Unwrap() http.ResponseWriter { return c.w }

func (c *capture) stream() {
	c.streamed = true
	c.size, c.sum = int64(c.buf.Len()), sha256.New()
	c.sum.Write(c.buf.Bytes())
	c.flush()
}

// digest is the hex SHA-256 of what a streamed response sent.
func (c *capture) digest() string { return hex.EncodeToString(c.sum.Sum(nil)) }

// flush sends what is held.
func (c *capture) flush() {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	h := c.w.Header()
	for k, v := range c.header {
		h[k] = v
	}
	c.w.WriteHeader(c.status)
	_, _ = c.w.Write(c.buf.Bytes())
	c.buf.Reset()
}

// response is what is stored: status, headers minus hop-by-hop ones and
// the operation's id (the replay sets it), body.
func (c *capture) response() *ledger.Response {
	h := c.header.Clone()
	contract.StripHopByHop(h)
	h.Del(contract.HeaderOperation)
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return &ledger.Response{Status: c.status, Header: h, Body: bytes.Clone(c.buf.Bytes())}
}
