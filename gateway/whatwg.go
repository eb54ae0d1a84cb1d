package gateway

import (
	"net/url"
	"strings"

	"golang.org/x/net/idna"
)

// A reference as a browser reads it: the WHATWG URL standard's parser, for
// what decides a reference's origin in an http or https document. Go's
// url.Parse follows RFC 3986, and reads several spellings otherwise:
// "http:/host/x", "http:\\host\x", "/\host/x", "\\host/x",
// "http://host\@evil/x" and "http://<tab>host/x" are each the host's origin
// to a browser, and were not to the gateway (issue 34, item 20).

// reference is a reference split as the standard splits it: an absolute
// URL (scheme, authority), a scheme-relative one (authority alone), or a
// path at the document's own origin (neither); rest is its path, query
// and fragment.
type reference struct {
	scheme, authority, rest string
	absolute, hasAuthority  bool
}

// readReference reads ref as a browser does in an http(s) document whose
// scheme differs from ref's (the reading that gives "http:/host/x" an
// authority: in a document of the same scheme it is a path there, at the
// gateway, which needs no rewriting either way). opaque is true for a
// scheme that is not http or https, which the gateway leaves as it is.
func readReference(ref string) (r reference, opaque bool) {
	// Leading and trailing C0 controls and spaces are stripped, and every
	// tab and newline removed, wherever it is.
	ref = strings.TrimFunc(ref, func(c rune) bool { return c <= ' ' })
	ref = strings.Map(func(c rune) rune {
		if c == '\t' || c == '\n' || c == '\r' {
			return -1
		}
		return c
	}, ref)
	scheme, rest, ok := splitScheme(ref)
	if ok && scheme != "http" && scheme != "https" {
		return reference{}, true
	}
	// Up to its query or fragment, a backslash is a slash.
	end := strings.IndexAny(rest, "?#")
	if end < 0 {
		end = len(rest)
	}
	rest = strings.ReplaceAll(rest[:end], `\`, "/") + rest[end:]
	r = reference{scheme: scheme, absolute: ok}
	switch {
	case ok: // any number of slashes, none included, then the authority
		r.hasAuthority, rest = true, strings.TrimLeft(rest, "/")
	case strings.HasPrefix(rest, "//"):
		r.hasAuthority, rest = true, strings.TrimLeft(rest, "/")
	}
	if r.hasAuthority {
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		r.authority, rest = rest[:end], rest[end:]
	}
	r.rest = rest
	return r, false
}

// splitScheme splits "scheme:rest", the scheme in lower case.
func splitScheme(ref string) (scheme, rest string, ok bool) {
	i := strings.IndexByte(ref, ':')
	if i <= 0 {
		return "", ref, false
	}
	for j, c := range ref[:i] {
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alpha && (j == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", ref, false
		}
	}
	return strings.ToLower(ref[:i]), ref[i+1:], true
}

// hostPort reads an authority's host, as the standard does (userinfo
// dropped at the last '@', percent-decoded, mapped to ASCII by UTS 46: a
// full-width digit or an upper-case letter is the host it looks like), and
// its port; ok is false for a host a browser would refuse.
func hostPort(authority string) (host, port string, ok bool) {
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	host = authority
	if i := strings.LastIndexByte(authority, ':'); i >= 0 && !strings.Contains(authority[i:], "]") {
		host, port = authority[:i], authority[i+1:]
	}
	if strings.HasPrefix(host, "[") {
		return strings.Trim(host, "[]"), port, strings.HasSuffix(host, "]")
	}
	decoded, err := url.PathUnescape(host)
	if err != nil || decoded == "" {
		return "", "", false
	}
	ascii, err := whatwgIDNA.ToASCII(decoded)
	return ascii, port, err == nil
}

// whatwgIDNA is the standard's domain to ASCII: UTS 46, not transitional,
// without STD3 rules or hyphen checks.
var whatwgIDNA = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.Transitional(false),
	idna.StrictDomainName(false), idna.CheckHyphens(false))
