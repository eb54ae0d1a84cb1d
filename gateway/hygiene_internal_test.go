package gateway

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"

	"github.com/idemgate/idemgate/contract"
)

func TestHasDotSegment(t *testing.T) {
	for p, want := range map[string]bool{
		"/v1/things/..": true, "/v1/things/.": true, "/..": true, "/./x": true, "..": true,
		"/v1/%2e%2E/x": true, "/v1/.%2e": true, "/v1/a%2F..": true, "/v1/a%2f.%2fb": true,
		"/v1/a%5C..": true, `/v1/a\..\b`: true, "/v1/%252e%252e": true, "/v1/%25252E": true,
		"/v1/..;jsessionid=1": true, "/v1/.;": true, "/v1/a%2F%2E%2E%5Cb": true,
		"/": false, "": false, "/v1/things/1": false, "/v1/...": false, "/v1/.a": false, "/v1/a.": false,
		"/v1/a..b": false, "/v1/a;..": false, "/v1/%2e%2e%2e": false, "/v1/%2": false, "/v1/%": false,
		"/v1/report.v2.pdf": false, "/v1/a%2Fb": false, "/v1/%zz..": false,
	} {
		if got := hasDotSegment(p); got != want {
			t.Errorf("hasDotSegment(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestOriginLocal(t *testing.T) {
	plain, _ := url.Parse("http://127.0.0.1:3000")
	prefixed, _ := url.Parse("https://API.example/base/")
	for _, c := range []struct {
		target *url.URL
		ref    string
		want   string // "" when ref stays
	}{
		{plain, "http://127.0.0.1:3000/tickets/1", "/tickets/1"},
		{plain, "HTTP://127.0.0.1:3000/tickets/1?a=%2F#f", "/tickets/1?a=%2F#f"},
		{plain, "http://127.0.0.1:3000", "/"},
		{plain, "http://127.0.0.1:3000/a%2Fb", "/a%2Fb"},
		{plain, "//127.0.0.1:3000/tickets/1", "/tickets/1"},
		{plain, "http://user@127.0.0.1:3000/x", "/x"},
		{plain, "https://127.0.0.1:3000/tickets/1", ""}, // another origin
		{plain, "http://127.0.0.1:3001/tickets/1", ""},
		// Other spellings of the same origin (issue 24, 7.16): compared
		// resolved, never as text.
		{plain, "http://localhost:3000/tickets/1", "/tickets/1"},
		{plain, "http://LocalHost.:3000/tickets/1", "/tickets/1"},
		{plain, "http://app.localhost:3000/x", "/x"},
		{plain, "http://[::ffff:127.0.0.1]:3000/x", "/x"},
		{plain, "http://[::ffff:7f00:1]:3000/x", "/x"},
		{plain, "http://127.0.0.1.:3000/x", "/x"},
		{plain, "http://127.1:3000/x", "/x"},
		{plain, "http://2130706433:3000/x", "/x"},
		{plain, "http://0x7f.0.0.1:3000/x", "/x"},
		{plain, "http://0177.0.0.1:3000/x", "/x"},
		{plain, "http://127.0.0.1:03000/x", "/x"},
		{plain, "http://127.0.0.2:3000/x", ""},
		{plain, "http://[::1]:3000/x", ""}, // another address: maybe another server
		{plain, "http://localhost:3001/x", ""},
		{plain, "http://127.0.0.1:3000x/x", ""},
		{plain, "http://localhost.example:3000/x", ""},
		{plain, "http://0b1111111.0.0.1:3000/x", ""}, // not a WHATWG number
		{plain, "http://127.0.0.1.1:3000/x", ""},
		{prefixed, "https://api.example.:443/base/x", "/x"},
		{prefixed, "https://API.EXAMPLE./base/x", "/x"},
		{plain, "/tickets/1", ""},
		{plain, "tickets/1", ""},
		{plain, "urn:x:1", ""},
		{prefixed, "https://api.example:443/base/tickets/1", "/tickets/1"},
		{prefixed, "https://api.example/base", "/"},
		{prefixed, "https://api.example/basement/1", "/basement/1"}, // not under the prefix: no path to strip
		{prefixed, "/base/tickets/1", "/tickets/1"},
		{prefixed, "//api.example/base/tickets/1", "/tickets/1"},
		{prefixed, "http://api.example/base/tickets/1", ""},
		{prefixed, "tickets/1", ""},
	} {
		got, ok := originOf(c.target).local(c.ref)
		if ok != (c.want != "") || got != c.want {
			t.Errorf("%s: local(%q) = %q, %v; want %q", c.target, c.ref, got, ok, c.want)
		}
	}
}

// TestOriginLocalByAddress: an upstream named by a host name is also
// recognised at the addresses it resolves to, and one at localhost at
// every loopback address localhost names.
func TestOriginLocalByAddress(t *testing.T) {
	named, _ := url.Parse("http://ops.internal:9090")
	o := originOf(named)
	if _, ok := o.local("http://10.1.2.3:9090/x"); ok {
		t.Fatal("an address nobody resolved was taken for the upstream's")
	}
	o.resolved([]netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::5")})
	for ref, want := range map[string]string{"http://10.1.2.3:9090/x": "/x", "http://[fd00::5]:9090/x": "/x",
		"http://[::ffff:10.1.2.3]:9090/x": "/x", "http://167838211:9090/x": "/x", "http://10.1.2.4:9090/x": "",
		"http://10.1.2.3:9091/x": ""} {
		if got, ok := o.local(ref); ok != (want != "") || got != want {
			t.Errorf("local(%q) = %q, %v; want %q", ref, got, ok, want)
		}
	}
	local, _ := url.Parse("http://localhost:3000")
	for ref, want := range map[string]string{"http://127.0.0.1:3000/x": "/x", "http://[::1]:3000/x": "/x",
		"http://127.0.0.2:3000/x": ""} {
		if got, ok := originOf(local).local(ref); ok != (want != "") || got != want {
			t.Errorf("localhost: local(%q) = %q, %v; want %q", ref, got, ok, want)
		}
	}
}

// TestHygieneAllocatesNothingWhenNothingIsWrong: the checks and the
// stripping on the hot path cost no allocation for a request with nothing
// to strip, and an answer without Location costs none either.
func TestHygieneAllocatesNothingWhenNothingIsWrong(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/payment-intents/pi_1.2/capture?x=1", nil)
	r.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"},
		"Content-Length": {"2"}, "User-Agent": {"agent/1"}, "Traceparent": {"00-1-2-01"}}
	u, _ := url.Parse("http://127.0.0.1:3000/base")
	uc := &upstreamClient{origin: originOf(u)}
	resp := http.Header{"Content-Type": {"application/json"}, "Date": {"now"}}
	allocs := testing.AllocsPerRun(100, func() {
		if refusal(r) != "" {
			t.Fatal("refused")
		}
		contract.StripHopByHop(r.Header)
		stripAgentHeaders(r.Header)
		contract.StripHopByHop(resp)
		uc.localize(resp)
	})
	if allocs != 0 || len(r.Header) != 5 {
		t.Fatalf("%v allocations per request; headers left %v", allocs, r.Header)
	}
}
