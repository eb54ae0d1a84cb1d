package gateway

import (
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/idemgate/idemgate/contract"
)

// This file is docs/design.md's "Header hygiene", for writes and reads alike:
// what is refused before anything is authenticated, reserved or forwarded,
// and what of the agent's request never reaches the upstream.

// hygienic answers 400 invalid_request to a request the gateway will not
// forward as it stands; the rest go on to next untouched.
func hygienic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := refusal(r); why != "" {
			contract.NewProblem(contract.CodeInvalidRequest, why).Write(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusal says why r is refused, or "" when it is not. It allocates
// nothing for a request with nothing to refuse and no escapes in its path.
func refusal(r *http.Request) string {
	for name := range r.Header {
		if strings.IndexByte(name, '_') >= 0 {
			// Some servers (and CGI) read '_' as '-': Idempotency_Key would
			// travel next to the gateway's own Idempotency-Key.
			return "header " + name + ": names with '_' are refused, some servers read them as '-'"
		}
	}
	for _, name := range []string{"Authorization", contract.HeaderKey} {
		if len(r.Header[name]) > 1 {
			return "two " + name + " headers: nobody can tell which one was meant; send one"
		}
	}
	path := r.URL.EscapedPath()
	if r.URL.RawPath != "" && path != r.URL.RawPath {
		// Forwarded as received or not at all: Go would re-encode such a
		// path, and %2F would become '/' on the way.
		return "the path holds characters that must be percent-encoded (RFC 3986)"
	}
	if hasDotSegment(path) {
		return "the path holds a dot segment ('.' or '..', encoded or not): it could name another route upstream"
	}
	return ""
}

// hasDotSegment reports whether the escaped path p holds a segment that is
// "." or "..", or that becomes one for an upstream that decodes it (once
// or twice: %2e, %252e), splits segments on %2F or on '\' (%5C), or
// ignores ";parameters" (Tomcat, Spring).
func hasDotSegment(p string) bool {
	dots, other, params := 0, false, false // of the current segment
	for i := 0; i <= len(p); {
		c, n := byte('/'), 1 // the end of p ends a segment
		if i < len(p) {
			c, n = decodeAt(p, i)
		}
		switch {
		case c == '/' || c == '\\':
			if dots > 0 && dots <= 2 && !other {
				return true
			}
			dots, other, params = 0, false, false
		case params:
		case c == ';':
			params = true
		case c == '.':
			dots++
		default:
			other = true
		}
		i += n
	}
	return false
}

// decodeAt reads the byte at p[i], percent-decoded as many times as it was
// encoded ("%2e" and "%252e" are both '.'), and how many bytes it took.
func decodeAt(p string, i int) (byte, int) {
	c, j := p[i], i+1
	for c == '%' && j+1 < len(p) && isHex(p[j]) && isHex(p[j+1]) {
		c, j = unhex(p[j])<<4|unhex(p[j+1]), j+2
	}
	return c, j - i
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// agentHeaders never reach the upstream: the agent's credentials, what it
// claims about where the request came from (the gateway says it), what
// would make the upstream run another method, or route to another path
// (IIS, Symfony and Zend read X-Original-URL and X-Rewrite-URL as the
// request's URL), than the one authorised and fingerprinted, and the
// gateway's own protocol.
var agentHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization", "Forwarded", "X-Real-Ip",
	"X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-Url", "X-Rewrite-Url",
	contract.HeaderKey, contract.HeaderPrefer}

// stripAgentHeaders removes agentHeaders and every X-Forwarded-* header,
// whatever the case of their names.
func stripAgentHeaders(h http.Header) {
	for k := range h {
		if len(k) > len("X-Forwarded-") && strings.EqualFold(k[:len("X-Forwarded-")], "X-Forwarded-") {
			delete(h, k)
			continue
		}
		for _, a := range agentHeaders {
			if strings.EqualFold(k, a) {
				delete(h, k)
				break
			}
		}
	}
}

// direct points an outbound request at the upstream, for the write proxy
// and the read proxy alike: the agent's headers out, the escaped path
// joined to the upstream's as received (%2F stays %2F), X-Forwarded-For,
// -Host and -Proto set by the gateway, and the upstream's own headers in.
// Request trailers are dropped: headers by another route.
func (uc *upstreamClient) direct(pr *httputil.ProxyRequest, key string) {
	stripAgentHeaders(pr.Out.Header)
	pr.Out.Trailer = nil
	pr.SetURL(uc.cfg.Target())
	pr.SetXForwarded()
	uc.setHeaders(pr.Out.Header, key)
}
