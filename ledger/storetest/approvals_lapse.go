package storetest

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// The approvals tests driven by time: expiry, valid_for, a lapsed holder.

func waitPast(t time.Time) { time.Sleep(time.Until(t) + 5*time.Millisecond) }

// testApprovalExpiry: a pending approval past its ttl is never decided or
// used; the sweep expires it, and a new one is opened for the same
// operation, once, however many retries ask.
func testApprovalExpiry(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	r := reserve(t, s, ApprovalParams(50*time.Millisecond, Long))
	old := r.Op.Approval
	waitPast(old.ExpiresAt)
	_, err := s.Approve(c, decision(old.ID))
	wantErr(t, "decision after expiry", err, ledger.ErrApprovalClosed)
	_, err = s.Acquire(c, ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "gw"})
	wantErr(t, "acquire after expiry", err, ledger.ErrApprovalRequired)
	if n, err := s.ExpireApprovals(c, 100); err != nil || n != 1 {
		t.Fatalf("expire approvals: %d %v", n, err)
	}
	if n, err := s.ExpireApprovals(c, 100); err != nil || n != 0 {
		t.Fatalf("second sweep: %d %v", n, err)
	}
	op := get(t, s, r.Op.ID)
	if op.State != ledger.Prepared || op.Approval.Status != ledger.ApprovalExpired {
		t.Fatalf("expired: %+v %+v", op, op.Approval)
	}
	req := *ApprovalParams(Long, Long).Approval
	req.ID = ledger.NewApprovalID()
	// Another principal's retry reopens it: the new approval is still
	// the requester's, and asks for the same thing.
	req.RequestedBy, req.Summary = "agent-2", "something else"
	reopened, err := s.ReopenApproval(c, ledger.ReopenParams{OpID: op.ID, Previous: old.ID, Request: req, Actor: "gw"})
	if err != nil || reopened.Approval.ID != req.ID || reopened.Approval.Status != ledger.ApprovalPending {
		t.Fatalf("reopen: %+v %v", reopened, err)
	}
	if a := getApproval(t, s, req.ID); a.RequestedBy != "agent-1" || a.Summary != "Deploy api:1.4.2 to production" {
		t.Fatalf("reopened approval names %q, summary %q", a.RequestedBy, a.Summary)
	}
	// The same reopening again (its reply lost) is recognised; another
	// retry's, naming the old approval, finds the new one open.
	if again, err := s.ReopenApproval(c, ledger.ReopenParams{OpID: op.ID, Previous: old.ID, Request: req,
		Actor: "gw"}); err != nil || again.Approval.ID != req.ID {
		t.Fatalf("repeated reopen: %+v %v", again, err)
	}
	other := req
	other.ID = ledger.NewApprovalID()
	current, err := s.ReopenApproval(c, ledger.ReopenParams{OpID: op.ID, Previous: old.ID, Request: other, Actor: "gw"})
	wantErr(t, "a second reopening", err, ledger.ErrIllegalTransition)
	if current == nil || current.Approval.ID != req.ID {
		t.Fatalf("refused reopen returns %+v", current)
	}
	_, err = s.ReopenApproval(c, ledger.ReopenParams{OpID: op.ID, Previous: req.ID, Request: other, Actor: "gw"})
	wantErr(t, "reopening a good approval", err, ledger.ErrIllegalTransition)
	a := getApproval(t, s, req.ID)
	if a.OpID != op.ID || a.Key != op.Key || a.Fingerprint != op.Fingerprint || a.Status != ledger.ApprovalPending {
		t.Fatalf("new approval %+v", a)
	}
	if old := getApproval(t, s, old.ID); old.Status != ledger.ApprovalExpired {
		t.Fatalf("old approval %s", old.Status)
	}
	if _, err := s.Approve(c, decision(req.ID)); err != nil {
		t.Fatalf("approve the new one: %v", err)
	}
	if res, err := s.Acquire(c, ledger.AcquireParams{ID: op.ID, Lease: Long, Actor: "gw"}); err != nil || !res.Owned() {
		t.Fatalf("acquire: %+v %v", res, err)
	}
	page, err := s.ListApprovals(c, ledger.ApprovalListParams{Tenant: "acme"})
	if err != nil || len(page.Approvals) != 2 {
		t.Fatalf("approvals: %d %v", len(page.Approvals), err)
	}
}

// testApprovalValidFor: an approval not used within valid_for is never
// used: the acquire is refused and the operation needs a new approval.
func testApprovalValidFor(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	r := reserve(t, s, ApprovalParams(Long, 50*time.Millisecond))
	a, err := s.Approve(c, decision(r.Op.Approval.ID))
	if err != nil {
		t.Fatal(err)
	}
	waitPast(a.ExpiresAt)
	_, err = s.Acquire(c, ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "gw"})
	wantErr(t, "acquire past valid_for", err, ledger.ErrApprovalRequired)
	req := *ApprovalParams(Long, Long).Approval
	op, err := s.ReopenApproval(c, ledger.ReopenParams{OpID: r.Op.ID, Previous: a.ID, Request: req, Actor: "gw"})
	if err != nil || op.Approval.Status != ledger.ApprovalPending || op.Approval.ID == a.ID {
		t.Fatalf("reopen after valid_for: %+v %v", op, err)
	}
	if got := getApproval(t, s, a.ID); got.Status != ledger.ApprovalExpired {
		t.Fatalf("lapsed approval is %s", got.Status)
	}
}

// testApprovalRelease: an approved operation whose send was definitely not
// delivered is released, and its next acquire, within valid_for, needs no
// second approval: the command it permits has not run.
func testApprovalRelease(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	r := reserve(t, s, ApprovalParams(Long, Long))
	if _, err := s.Approve(c, decision(r.Op.Approval.ID)); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(c, ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(c, *res.Lease, ledger.Note{Reason: "connection refused"}); err != nil {
		t.Fatal(err)
	}
	res, err = s.Acquire(c, ledger.AcquireParams{ID: r.Op.ID, Lease: Long, Actor: "gw"})
	if err != nil || res.Op.Attempts != 2 || res.Op.Approval.Status != ledger.ApprovalUsed {
		t.Fatalf("acquire after release: %+v %v", res, err)
	}
}

// testApprovalLapsedHolder: a reservation that finds its concurrency group
// held by an approval past its time, which no sweep has expired, expires it
// and takes the group.
func testApprovalLapsedHolder(t *testing.T, b Backend) {
	s := b.Fresh(t)
	p := ApprovalParams(50*time.Millisecond, Long)
	p.ConcurrencyKey = "production"
	held := reserve(t, s, p)
	waitPast(held.Op.Approval.ExpiresAt)
	next := Params(Long)
	next.Route, next.ConcurrencyKey = p.Route, "production"
	if r := reserve(t, s, next); !r.Owned() {
		t.Fatalf("reserve after the lapse: %+v", r)
	}
	if a := getApproval(t, s, held.Op.Approval.ID); a.Status != ledger.ApprovalExpired {
		t.Fatalf("the lapsed holder's approval is %s", a.Status)
	}
}
