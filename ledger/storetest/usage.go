package storetest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// testUsage: a tenant's live operations (prepared, executing, unknown),
// its pending approvals, and an estimate of every byte its operations and
// approvals hold (keys, targets, stored answers, approval commands, the
// audit events that copy an operation's context), and nothing of another
// tenant's.
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
	before, err := s.Usage(c, "acme")
	headers, _ := json.Marshal(resp.Header)
	if err != nil || before.Live != 3 || before.Pending != 0 || before.Stored < int64(len(resp.Body)+len(headers)) {
		t.Fatalf("usage of acme: %+v, %v", before, err)
	}
	if u, err := s.Usage(c, "globex"); err != nil || u.Live != 1 || u.Stored <= 0 || u.Stored >= before.Stored {
		t.Fatalf("usage of globex: %+v, %v", u, err)
	}
	testUsageCountsWhatIsHeld(t, s, before)
}

// testUsageCountsWhatIsHeld: a long key and target, and an approval's
// command, count at least their bytes, and an operation's context counts
// again in each audit event that copies it.
func testUsageCountsWhatIsHeld(t *testing.T, s ledger.Store, before ledger.Usage) {
	c := ctx(t)
	p := Params(Long)
	p.Key, p.Target = strings.Repeat("k", 200), "POST /v1/notes/"+strings.Repeat("t", 10000)
	reserve(t, s, p)
	u, err := s.Usage(c, "acme")
	if grew := u.Stored - before.Stored; err != nil || grew < 2*int64(len(p.Key)+len(p.Target)) {
		t.Fatalf("a 10 KB target and its event grew the usage by %d bytes: %+v, %v", grew, u, err)
	}
	before = u
	a := ApprovalParams(Long, Long)
	a.Approval.Command = []byte(`{"text":"` + strings.Repeat("c", 50000) + `"}`)
	reserve(t, s, a)
	u, err = s.Usage(c, "acme")
	if grew := u.Stored - before.Stored; err != nil || u.Pending != 1 || u.Live != before.Live+1 ||
		grew < int64(len(a.Approval.Command)) {
		t.Fatalf("a pending approval of a 50 KB command grew the usage by %d bytes: %+v, %v", grew, u, err)
	}
}
