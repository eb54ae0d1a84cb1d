package webui

import (
	"fmt"
	"testing"
)

// TestPathParams: a route's parameters read off a target, and nothing off
// a target that does not fit.
func TestPathParams(t *testing.T) {
	for _, c := range []struct{ route, target, want string }{
		{"POST /v1/payment-intents/{id}/capture", "POST /v1/payment-intents/pi_7/capture", "[id=pi_7]"},
		{"PUT /v1/{org}/files/{path...}", "PUT /v1/acme/files/a/b.txt", "[org=acme path=a/b.txt]"},
		{"POST /v1/refunds", "POST /v1/refunds", "[]"},
		{"POST /v1/x/{id}", "POST /v1/y/7", "[]"},
		{"POST /v1/x/{id}", "POST /v1/x/7/more", "[]"},
		{"POST /v1/x}/{id}", "POST /v1/x}/7", "[id=7]"},
		{"action:mail.send", "", "[]"},
	} {
		var got []string
		for _, p := range pathParams(c.route, c.target) {
			got = append(got, p.Pointer+"="+p.Value)
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("pathParams(%q, %q) = %s, want %s", c.route, c.target, got, c.want)
		}
	}
	for in, want := range map[string]string{"id=pi_7": "id=pi_7", "/v1/{id}": "'/v1/{id}'", "it's": `'it'\''s'`, "": "''"} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}
