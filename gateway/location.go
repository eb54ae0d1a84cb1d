package gateway

import (
	"cmp"
	"net/http"
	"net/url"
	"strings"
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

// origin is an upstream's scheme, host and port (the default one made
// explicit) and its URL's path prefix, escaped, without a final '/'.
type origin struct {
	scheme, hostPort, prefix string
}

func originOf(u *url.URL) origin {
	return origin{scheme: u.Scheme, hostPort: hostPort(u.Scheme, u), prefix: strings.TrimSuffix(u.EscapedPath(), "/")}
}

func hostPort(scheme string, u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return strings.ToLower(u.Hostname()) + ":" + port
}

// local returns ref as the gateway's path if it points at o: an absolute
// or scheme-relative URL of o's origin, or an absolute path (resolved
// against the upstream, so under its prefix); ok is false when ref stays.
func (o origin) local(ref string) (local string, ok bool) {
	if o.prefix == "" && strings.HasPrefix(ref, "/") && !strings.HasPrefix(ref, "//") {
		return "", false // a path at the upstream is the same path here
	}
	u, err := url.Parse(ref)
	switch {
	case err != nil:
		return "", false
	case u.Host != "":
		scheme := strings.ToLower(cmp.Or(u.Scheme, o.scheme))
		if scheme != o.scheme || hostPort(scheme, u) != o.hostPort {
			return "", false
		}
	case u.Scheme != "" || !strings.HasPrefix(u.Path, "/"):
		return "", false // relative, or another scheme (urn:, mailto:)
	}
	path := u.EscapedPath()
	switch {
	case o.prefix != "" && path == o.prefix:
		path = "/"
	case o.prefix != "" && strings.HasPrefix(path, o.prefix+"/"):
		path = path[len(o.prefix):]
	case path == "":
		path = "/"
	}
	if u.RawQuery != "" || u.ForceQuery {
		path += "?" + u.RawQuery
	}
	if u.Fragment != "" {
		path += "#" + u.EscapedFragment()
	}
	return path, true
}
