// Package resultref reads an upstream's reference for the effect it made
// (docs/design.md, "Audit log": `result_ref: body:/id` or
// `header:X-Request-Id`) from its answer. The middleware, the outbox's
// relay and the reconciler read references the same way.
package resultref

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idemgate/idemgate/internal/jsonptr"
)

// Reader reads the reference from an answer: "" for a failed answer, or
// one without a short printable reference.
type Reader func(status int, h http.Header, body []byte) string

// Compile parses a spec, "body:/pointer" or "header:NAME"; "" compiles to
// a nil Reader (no reference).
func Compile(spec string) (Reader, error) {
	kind, ref, _ := strings.Cut(spec, ":")
	switch kind {
	case "":
		return nil, nil
	case "header":
		if ref != "" {
			name := http.CanonicalHeaderKey(ref)
			return func(status int, h http.Header, _ []byte) string { return keep(status, h.Get(name)) }, nil
		}
	case "body":
		if toks, err := jsonptr.Parse(ref); err == nil && len(toks) > 0 {
			return func(status int, _ http.Header, body []byte) string { return keep(status, fromBody(body, toks)) }, nil
		}
	}
	return nil, fmt.Errorf("result_ref %q: want body:/pointer or header:NAME", spec)
}

// Of reads with r, which may be nil (no reference).
func (r Reader) Of(status int, h http.Header, body []byte) string {
	if r == nil {
		return ""
	}
	return r(status, h, body)
}

// Max bounds a reference kept: a ticket id, a charge id.
const Max = 255

// fromBody reads a string or a number at the pointer.
func fromBody(body []byte, toks []string) string {
	var doc any
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	switch x, _ := jsonptr.Get(doc, toks); x := x.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return ""
}

// keep is v when it names an effect: a successful answer's short
// printable text.
func keep(status int, v string) string {
	if status >= 400 || len(v) > Max || !utf8.ValidString(v) || strings.IndexFunc(v, notPrintable) >= 0 {
		return ""
	}
	return v
}

func notPrintable(r rune) bool { return !unicode.IsPrint(r) }
