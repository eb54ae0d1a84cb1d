package contract

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// hopByHop are the headers that describe one connection (RFC 9110, 7.6.1),
// never forwarded and never stored for a replay. Proxy-Connection is not
// standard, but old clients and proxies still send it, and it means the
// same.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// StripHopByHop removes from a request's or a response's header the
// hop-by-hop headers and every header that Connection names, each value
// a comma-separated list.
func StripHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for v != "" {
			var name string
			name, v, _ = strings.Cut(v, ",")
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
}

// IsHopByHop reports whether the canonical header name k is hop-by-hop:
// never forwarded, never stored, never replayed.
func IsHopByHop(k string) bool { return slices.Contains(hopByHop, k) }
