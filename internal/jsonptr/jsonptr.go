// Package jsonptr reads and removes RFC 6901 JSON Pointers in documents
// decoded into map[string]any and []any (as fingerprint.Parse makes them).
package jsonptr

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse splits a pointer into its unescaped tokens. "" is the whole
// document; anything else starts with "/".
func Parse(ptr string) ([]string, error) {
	if ptr == "" {
		return nil, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("json pointer %q must start with /", ptr)
	}
	parts := strings.Split(ptr[1:], "/")
	for i, p := range parts {
		if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(p, "~0", ""), "~1", ""), "~") {
			return nil, fmt.Errorf("json pointer %q: bad escape in %q", ptr, p)
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

// Get returns the value at ptr, and whether it exists.
func Get(doc any, tokens []string) (any, bool) {
	cur := doc
	for _, t := range tokens {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := index(t, len(c))
			if !ok {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// Remove deletes the member or element at ptr, in place, and reports
// whether there was one. The whole document cannot be removed.
func Remove(doc any, tokens []string) bool {
	if len(tokens) == 0 {
		return false
	}
	parent, ok := Get(doc, tokens[:len(tokens)-1])
	if !ok {
		return false
	}
	last := tokens[len(tokens)-1]
	switch c := parent.(type) {
	case map[string]any:
		_, had := c[last]
		delete(c, last)
		return had
	case []any:
		// Arrays are shared slices: blank the element rather than shift,
		// so that the removal is visible through every reference.
		if i, ok := index(last, len(c)); ok {
			c[i] = nil
			return true
		}
	}
	return false
}

func index(tok string, n int) (int, bool) {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(tok)
	return i, err == nil && i >= 0 && i < n
}
