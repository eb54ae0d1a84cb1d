package mcpproxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
)

// errRedirected is an HTTP MCP server's redirect, never followed: its
// configured headers (its credentials) go to its configured origin only,
// and a call is never sent twice. The call it answered reached the
// server, so its outcome is unknown.
var errRedirected = errors.New("the MCP server answered with a redirect, which the proxy does not follow")

// originTransport is a Streamable HTTP server's transport: it adds the
// server's configured headers only to requests for its configured
// origin, turns a redirect into an error instead of following it, and
// bounds every answer it reads (bounded).
type originTransport struct {
	origin  string // scheme://host[:port] of the configured url
	headers map[string]string
	limit   int
	next    http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *originTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	if track, ok := ctx.Value(trackKey{}).(*sendTrack); ok {
		track.seen.Store(true)
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { track.wrote.Store(true) }})
	}
	r = r.Clone(ctx)
	if originOf(r.URL) == t.origin {
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	id := requestID(r)
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if track, ok := ctx.Value(trackKey{}).(*sendTrack); ok && resp.StatusCode == http.StatusNotFound &&
		r.Header.Get("Mcp-Session-Id") != "" {
		track.sessionGone.Store(true) // the server does not know the session: it ran nothing
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		_ = resp.Body.Close()
		to := "nowhere"
		if loc, err := resp.Location(); err == nil {
			to = originOf(loc)
		}
		return nil, fmt.Errorf("%w: %s to %s; set url to the address that answers", errRedirected, resp.Status, to)
	}
	if id != nil {
		resp.Body = bounded(resp, id, t.limit)
	}
	return resp, nil
}

// originOf is a URL's scheme and host, all of it that may be shown.
func originOf(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}

// requestID is the JSON-RPC id of the call a POST carries, nil for a
// message that expects no answer.
func requestID(r *http.Request) json.RawMessage {
	if r.Method != http.MethodPost || r.GetBody == nil {
		return nil
	}
	body, err := r.GetBody()
	if err != nil {
		return nil
	}
	defer body.Close()
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.NewDecoder(body).Decode(&msg) != nil || msg.Method == "" || len(msg.ID) == 0 {
		return nil
	}
	return msg.ID
}

// codeTooLarge is the JSON-RPC error the proxy puts in place of an
// answer larger than it reads: never the server's, so never a failure
// the server reported (answered).
const codeTooLarge = -32098

// tooLargeMark marks codeTooLarge's data as the proxy's own.
const tooLargeMark = "io.idemgate/answer_too_large"

// tooLarge is the message that stands for an answer over limit bytes,
// which was not read, to call id.
func tooLarge(id json.RawMessage, limit int) []byte {
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{
		"code": codeTooLarge, "data": map[string]any{tooLargeMark: limit},
		"message": fmt.Sprintf("the MCP server's answer was larger than the %d bytes the proxy reads; "+
			"it was not read, so whether the call took effect is unknown", limit)}})
	return msg
}

// bounded reads an answer to call id up to limit bytes: one JSON body,
// or each event of a stream. Past the limit it stops reading, closes the
// body, and hands on tooLarge in place of the rest: the call ends, and
// the session goes on.
func bounded(resp *http.Response, id json.RawMessage, limit int) io.ReadCloser {
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	switch strings.TrimSpace(strings.ToLower(ct)) {
	case "application/json":
		return &jsonBound{body: resp.Body, id: id, limit: limit}
	case "text/event-stream":
		b := &sseBound{body: resp.Body, br: bufio.NewReaderSize(resp.Body, 32<<10), id: id, limit: limit}
		b.fill = b.next
		return b
	}
	return resp.Body
}

// jsonBound is a JSON answer, read at most limit bytes deep.
type jsonBound struct {
	body  io.ReadCloser
	id    json.RawMessage
	limit int
	r     io.Reader
}

func (b *jsonBound) Read(p []byte) (int, error) {
	if b.r == nil {
		buf, err := io.ReadAll(io.LimitReader(b.body, int64(b.limit)+1))
		switch {
		case len(buf) > b.limit:
			_ = b.body.Close()
			buf = tooLarge(b.id, b.limit)
		case err != nil:
			return 0, err
		}
		b.r = bytes.NewReader(buf)
	}
	return b.r.Read(p)
}

func (b *jsonBound) Close() error { return b.body.Close() }

// sseBound is a stream of events, each handed on whole once it ends, and
// none read past limit bytes: a larger one ends the stream with tooLarge.
type sseBound struct {
	handOn
	body  io.ReadCloser
	br    *bufio.Reader
	id    json.RawMessage
	limit int
	event []byte // the event being read
}

// handOn is a reader of what fill makes ready, piece by piece.
type handOn struct {
	out  []byte // what is ready to hand on
	err  error  // once set, the stream ends when out is handed on
	fill func()
}

func (h *handOn) Read(p []byte) (int, error) {
	for len(h.out) == 0 {
		if h.err != nil {
			return 0, h.err
		}
		h.fill()
	}
	n := copy(p, h.out)
	h.out = h.out[n:]
	return n, nil
}

// next reads one line of the current event.
func (b *sseBound) next() {
	line, err := b.br.ReadSlice('\n')
	b.event = append(b.event, line...)
	switch {
	case len(b.event) > b.limit:
		_ = b.body.Close()
		b.event, b.err = nil, io.EOF
		b.out = slices.Concat([]byte("event: message\ndata: "), tooLarge(b.id, b.limit), []byte("\n\n"))
	case errors.Is(err, bufio.ErrBufferFull):
	case err != nil:
		b.out, b.event, b.err = b.event, nil, err
	case len(bytes.TrimRight(line, "\r\n")) == 0: // a blank line ends an event
		b.out, b.event = b.event, nil
	}
}

func (b *sseBound) Close() error { return b.body.Close() }

// redactor hides what of a server's url may be a secret (its userinfo,
// path and query) in any text shown to a client or logged: only its
// origin is shown.
type redactor struct {
	host    string // what follows a userinfo's @
	shown   string
	secrets []string // longest first
}

func newRedactor(raw string) redactor {
	u, err := url.Parse(raw)
	if raw == "" || err != nil {
		return redactor{}
	}
	r := redactor{host: u.Host, shown: originOf(u)}
	bare := *u
	bare.User = nil
	var parts []string
	if u.User != nil {
		parts = append(parts, u.User.String())
	}
	if u.RawQuery != "" {
		parts = append(parts, u.RawQuery, u.Query().Encode())
	}
	if len(u.Path) > 1 {
		parts = append(parts, u.EscapedPath(), u.Path)
	}
	for _, s := range append([]string{raw, bare.String()}, parts...) {
		if s != "" && !slices.Contains(r.secrets, s) {
			r.secrets = append(r.secrets, s)
		}
	}
	slices.SortStableFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

// text is s with every secret of the url replaced: first any userinfo
// before its host (as the url has it, or as net/http's errors show it,
// the password as ***), then the url, then each of its parts.
func (r redactor) text(s string) string {
	if r.host == "" {
		return s
	}
	for at := strings.Index(s, "@"+r.host); at >= 0; at = strings.Index(s, "@"+r.host) {
		from := strings.LastIndex(s[:at], "://")
		if from < 0 || from < at-512 {
			break
		}
		s = s[:from+3] + s[at+1:]
	}
	for _, secret := range r.secrets {
		with := "…"
		if strings.Contains(secret, "://") {
			with = r.shown
		}
		s = strings.ReplaceAll(s, secret, with)
	}
	return s
}

// err is err with its text redacted; errors.Is and As still see through
// it.
func (r redactor) err(err error) error {
	if err == nil || r.host == "" {
		return err
	}
	return redactedError{err: err, text: r.text(err.Error())}
}

type redactedError struct {
	err  error
	text string
}

func (e redactedError) Error() string { return e.text }
func (e redactedError) Unwrap() error { return e.err }
