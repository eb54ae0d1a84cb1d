package storetest

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// testApprovalHeaders (issue 24, 7.7): the headers of the request an
// approval asks about are kept with it, shown with every read of it, and
// carried by a reopened approval (which asks for the same request); an
// approval that kept none (nil) reads nil, one that kept an empty set an
// empty set.
func testApprovalHeaders(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	sent := map[string][]string{"X-Target-Cluster": {"eu-1"}, "Accept": {"application/json", "text/plain"}}
	p := ApprovalParams(Long, Long)
	p.Approval.Headers = sent
	r := reserve(t, s, p)
	if a := getApproval(t, s, r.Op.Approval.ID); !reflect.DeepEqual(a.Headers, sent) {
		t.Fatalf("read back: %v, want %v", a.Headers, sent)
	}
	decided, err := s.Approve(c, decision(r.Op.Approval.ID))
	if err != nil || !reflect.DeepEqual(decided.Headers, sent) {
		t.Fatalf("approved: %v %v", decided, err)
	}
	page, err := s.ListApprovals(c, ledger.ApprovalListParams{Tenant: "acme"})
	if err != nil || len(page.Approvals) != 1 || !reflect.DeepEqual(page.Approvals[0].Headers, sent) {
		t.Fatalf("listed: %+v %v", page.Approvals, err)
	}
	bare := reserve(t, s, ApprovalParams(Long, Long))
	if a := getApproval(t, s, bare.Op.Approval.ID); a.Headers != nil {
		t.Fatalf("an approval that kept no headers reads %v", a.Headers)
	}
	none := ApprovalParams(Long, Long)
	none.Approval.Headers = http.Header{}
	if a := getApproval(t, s, reserve(t, s, none).Op.Approval.ID); a.Headers == nil || len(a.Headers) != 0 {
		t.Fatalf("an approval that kept an empty set reads %#v", a.Headers)
	}
	lapsing := ApprovalParams(Lapsing, Long)
	lapsing.Approval.Headers = sent
	old := reserve(t, s, lapsing)
	waitPast(old.Op.Approval.ExpiresAt)
	req := *ApprovalParams(Long, Long).Approval
	req.ID, req.Headers = ledger.NewApprovalID(), http.Header{"Stripe-Account": {"acct_attacker"}}
	if _, err := s.ReopenApproval(c, ledger.ReopenParams{OpID: old.Op.ID, Previous: old.Op.Approval.ID, Request: req,
		Actor: "gw"}); err != nil {
		t.Fatal(err)
	}
	if a := getApproval(t, s, req.ID); !reflect.DeepEqual(a.Headers, sent) {
		t.Fatalf("the reopened approval asks with %v, want the request's own %v", a.Headers, sent)
	}
}
