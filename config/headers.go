package config

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"
)

// checkHeaders refuses, at its line, an upstream header that the transport
// would refuse on every request (a value from ${ENV} with a newline, say):
// else the gateway starts and answers 502 to everything. Two names that
// differ only in case are refused too, as only one of them, at random,
// would be sent. A value is never quoted: it is usually a secret.
func (c *Config) checkHeaders(name string, u *Upstream) error {
	return c.checkHeaderSet(fmt.Sprintf("upstream %q", name), u.Headers, u.headerLines, u.line)
}

// checkHeaderSet is checkHeaders for what's headers (an upstream's, an
// MCP server's), each at its line in lines or else at line.
func (c *Config) checkHeaderSet(what string, headers map[string]string, lines map[string]int, line0 int) error {
	seen := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		line, canon := cmp.Or(lines[k], line0), http.CanonicalHeaderKey(k)
		switch {
		case !httpguts.ValidHeaderFieldName(k):
			return c.errorf(line, "%s: header name %q is not a valid HTTP field name", what, k)
		case !httpguts.ValidHeaderFieldValue(headers[k]):
			return c.errorf(line, "%s: header %s: the value is not a valid HTTP field value "+
				"(CR, LF, NUL or another control character; check the environment variables it uses)", what, k)
		case seen[canon] != "":
			return c.errorf(line, "%s: header %s is given twice (%q and %q)", what, canon, seen[canon], k)
		}
		seen[canon] = k
	}
	return nil
}

// keyLines maps each key of the mapping under name, in the mapping n, to
// its line.
func keyLines(n *yaml.Node, name string) map[string]int {
	lines := map[string]int{}
	for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		if m := n.Content[i+1]; n.Content[i].Value == name && m.Kind == yaml.MappingNode {
			for j := 0; j+1 < len(m.Content); j += 2 {
				lines[m.Content[j].Value] = m.Content[j].Line
			}
		}
	}
	return lines
}
