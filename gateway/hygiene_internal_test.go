package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
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

// TestHygieneAllocatesNothingWhenNothingIsWrong: the checks and the
// stripping on the hot path cost no allocation for a request with nothing
// to strip.
func TestHygieneAllocatesNothingWhenNothingIsWrong(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/payment-intents/pi_1.2/capture?x=1", nil)
	r.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"},
		"Content-Length": {"2"}, "User-Agent": {"agent/1"}, "Traceparent": {"00-1-2-01"}}
	resp := http.Header{"Content-Type": {"application/json"}, "Date": {"now"}}
	allocs := testing.AllocsPerRun(100, func() {
		if refusal(r) != "" {
			t.Fatal("refused")
		}
		stripHopByHop(r.Header)
		stripAgentHeaders(r.Header)
		stripHopByHop(resp)
	})
	if allocs != 0 || len(r.Header) != 5 {
		t.Fatalf("%v allocations per request; headers left %v", allocs, r.Header)
	}
}
