package resultref

import (
	"net/http"
	"strings"
	"testing"
)

// TestReader: a reference is read from the body's pointer or a header,
// only from an answer that is not a failure, and only when it is short
// printable text; a bad spec is refused, and none reads nothing.
func TestReader(t *testing.T) {
	h := http.Header{"X-Request-Id": {"req-9"}}
	for _, c := range []struct {
		spec   string
		status int
		body   string
		want   string
	}{
		{"body:/id", 201, `{"id":"T-7"}`, "T-7"},
		{"body:/id", 201, `{"id":42}`, "42"},
		{"body:/charge/id", 200, `{"charge":{"id":"ch_1"}}`, "ch_1"},
		{"body:/id", 422, `{"id":"T-7"}`, ""},
		{"body:/id", 201, `not json`, ""},
		{"body:/id", 201, `{"id":"a\u0007b"}`, ""},
		{"body:/id", 201, `{"id":"` + strings.Repeat("x", Max+1) + `"}`, ""},
		{"body:/id", 201, `{"id":{"nested":1}}`, ""},
		{"header:x-request-id", 201, ``, "req-9"},
		{"", 201, `{"id":"T-7"}`, ""},
	} {
		r, err := Compile(c.spec)
		if err != nil {
			t.Fatalf("%q: %v", c.spec, err)
		}
		if got := r.Of(c.status, h, []byte(c.body)); got != c.want {
			t.Errorf("%q on %d %s: %q, want %q", c.spec, c.status, c.body, got, c.want)
		}
	}
	for _, bad := range []string{"body:", "body:id", "header:", "query:/id", "body"} {
		if _, err := Compile(bad); err == nil {
			t.Errorf("%q compiled", bad)
		}
	}
}
