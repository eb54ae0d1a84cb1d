package gateway

import (
	"cmp"
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// localize rewrites, in an upstream's answer, the Location and
// Content-Location that point at the upstream itself as the gateway's
// path, so that an agent never learns, or goes around the gateway to, the
// upstream's address. Other origins and relative references stay.
func (uc *upstreamClient) localize(h http.Header) {
	for _, k := range []string{"Location", "Content-Location"} {
		for i, v := range h[k] {
			if local, ok := uc.origin.local(v); ok {
				h[k][i] = local
			}
		}
	}
}

// origin is an upstream's scheme, host (canonicalHost), port (the default
// one made explicit) and its URL's path prefix, escaped, without a final
// '/'; and the addresses its host stands for, once known, so that another
// spelling of it (localhost for 127.0.0.1, [::ffff:127.0.0.1], a final
// dot) is recognised too: origins are compared resolved, never as text.
type origin struct {
	scheme, host, port, prefix string
	addrs                      atomic.Pointer[[]netip.Addr]
}

func originOf(u *url.URL) *origin {
	o := &origin{scheme: u.Scheme, host: canonicalHost(u.Hostname()), port: portOf(u.Scheme, u.Port()),
		prefix: strings.TrimSuffix(u.EscapedPath(), "/")}
	if addrs := addrsOf(o.host); addrs != nil {
		o.resolved(addrs)
	}
	return o
}

// resolved records the addresses the upstream's host stands for.
func (o *origin) resolved(addrs []netip.Addr) {
	unmapped := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		unmapped[i] = a.Unmap()
	}
	o.addrs.Store(&unmapped)
}

// resolve looks a host name up once, in the background, so that a
// Location at one of its addresses is recognised: until it answers (or if
// it fails) the name alone is. A name in a Location is never looked up:
// an answer must not wait for the DNS.
func (o *origin) resolve() {
	if o.addrs.Load() != nil {
		return // an address, or localhost
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", o.host); err == nil {
			o.resolved(addrs)
		}
	}()
}

// same reports whether host and port (as a URL spells them) are o's.
func (o *origin) same(scheme, host, port string) bool {
	if portOf(scheme, port) != o.port {
		return false
	}
	host = canonicalHost(host)
	if host == o.host {
		return true
	}
	theirs, ours := addrsOf(host), o.addrs.Load()
	if theirs == nil || ours == nil {
		return false
	}
	for _, a := range theirs {
		if slices.Contains(*ours, a) {
			return true
		}
	}
	return false
}

// portOf is port as a number, or scheme's default.
func portOf(scheme, port string) string {
	if port == "" {
		return map[string]string{"http": "80", "https": "443"}[scheme]
	}
	if n, err := strconv.Atoi(port); err == nil {
		return strconv.Itoa(n)
	}
	return "?" + port
}

// canonicalHost is host in lower case without its final dot, and an
// address in its one form: an IPv4-mapped IPv6 address as IPv4, and the
// IPv4 forms a WHATWG URL parser reads (127.1, 2130706433, 0x7f.0.0.1) as
// dotted decimal, since an agent's client would go there.
func canonicalHost(host string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().String()
	}
	if a, ok := looseIPv4(host); ok {
		return a.String()
	}
	return host
}

// addrsOf is what a canonical host stands for without asking the DNS: an
// address itself, or the loopback addresses for localhost (RFC 6761);
// nil for any other name.
func addrsOf(host string) []netip.Addr {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
	}
	return nil
}

// looseIPv4 parses the WHATWG URL standard's IPv4 host: one to four parts,
// each decimal, octal (a leading 0) or hexadecimal (0x), the last filling
// the bytes left.
func looseIPv4(host string) (netip.Addr, bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var n uint64
	for i, p := range parts {
		v, ok := ipv4Part(p)
		last := i == len(parts)-1
		if !ok || (!last && v > 255) || (last && v >= 1<<(8*(5-len(parts)))) {
			return netip.Addr{}, false
		}
		if last {
			n = n<<(8*(5-len(parts))) | v
		} else {
			n = n<<8 | v
		}
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// ipv4Part reads one part of a WHATWG IPv4 host ("0x" alone is 0).
func ipv4Part(p string) (uint64, bool) {
	base := 10
	switch {
	case strings.HasPrefix(p, "0x"):
		if base, p = 16, p[2:]; p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	v, err := strconv.ParseUint(p, base, 32)
	return v, err == nil
}

// local returns ref as the gateway's path if a browser reads it as o's
// (readReference): an absolute or scheme-relative URL of o's origin, or an
// absolute path (resolved against the upstream, so under its prefix); ok
// is false when ref stays. The path never begins with two slashes, which a
// browser would read as another origin.
func (o *origin) local(ref string) (local string, ok bool) {
	r, opaque := readReference(ref)
	switch {
	case opaque: // another scheme (urn:, mailto:)
		return "", false
	case r.hasAuthority:
		host, port, valid := hostPort(r.authority)
		scheme := cmp.Or(r.scheme, o.scheme)
		if !valid || scheme != o.scheme || !o.same(scheme, host, port) {
			return "", false
		}
	case !strings.HasPrefix(r.rest, "/"):
		return "", false // relative
	case o.prefix == "":
		return "", false // a path at the upstream is the same path here
	}
	path, tail := r.rest, ""
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path, tail = path[:i], path[i:]
	}
	path = "/" + strings.TrimLeft(path, "/")
	switch {
	case o.prefix != "" && path == o.prefix:
		path = "/"
	case o.prefix != "" && strings.HasPrefix(path, o.prefix+"/"):
		path = "/" + strings.TrimLeft(path[len(o.prefix):], "/")
	}
	return path + tail, true
}
