package storetest

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// testUsage: a tenant's live operations (prepared, executing, unknown) and
// the bytes of its stored responses, and nothing of another tenant's.
func testUsage(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	if u, err := s.Usage(c, "acme"); err != nil || u != (ledger.Usage{}) {
		t.Fatalf("usage of an empty store: %+v, %v", u, err)
	}
	reach(t, s, ledger.Prepared)
	reach(t, s, ledger.Executing)
	reach(t, s, ledger.Unknown)
	_, l := reach(t, s, ledger.Executing)
	resp := &ledger.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"T-1"}`)}
	if _, err := s.Complete(c, l, ledger.Outcome{State: ledger.Succeeded, Response: resp}); err != nil {
		t.Fatal(err)
	}
	other := Params(Long)
	other.Tenant = "globex"
	reserve(t, s, other)
	headers, _ := json.Marshal(resp.Header)
	want := ledger.Usage{Live: 3, Stored: int64(len(resp.Body) + len(headers))}
	if u, err := s.Usage(c, "acme"); err != nil || u != want {
		t.Fatalf("usage of acme: %+v, %v; want %+v", u, err, want)
	}
	if u, err := s.Usage(c, "globex"); err != nil || u != (ledger.Usage{Live: 1}) {
		t.Fatalf("usage of globex: %+v, %v", u, err)
	}
}
