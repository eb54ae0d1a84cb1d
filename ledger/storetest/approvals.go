package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// The fingerprint approvals in this suite bind, and one they do not.
const (
	approvalFP = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	otherFP    = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// runApprovals is the approvals part of the suite.
func runApprovals(t *testing.T, b Backend) {
	t.Run("ApprovalReserve", inParallel(b, testApprovalReserve))
	t.Run("ApprovalDecide", inParallel(b, testApprovalDecide))
	t.Run("ApprovalDeny", inParallel(b, testApprovalDeny))
	t.Run("ApprovalExpiry", inParallel(b, testApprovalExpiry))
	t.Run("ApprovalValidFor", inParallel(b, testApprovalValidFor))
	t.Run("ApprovalRelease", inParallel(b, testApprovalRelease))
	t.Run("ApprovalConcurrencyKey", inParallel(b, testApprovalConcurrencyKey))
	t.Run("ApprovalLapsedHolder", inParallel(b, testApprovalLapsedHolder))
	t.Run("ApprovalList", inParallel(b, testApprovalList))
	t.Run("ApprovalHeaders", inParallel(b, testApprovalHeaders))
	t.Run("ApprovalPurge", inParallel(b, testApprovalPurge))
	t.Run("RaceDecisions", inParallel(b, testRaceDecisions))
	t.Run("RaceApprovedRetries", inParallel(b, testRaceApprovedRetries))
}

// ApprovalParams returns reserve parameters for a fresh key in tenant
// "acme" whose operation waits for an approval, requested by agent-1 and
// decided by the approver role.
func ApprovalParams(ttl, validFor time.Duration) ledger.ReserveParams {
	p := Params(0)
	p.Route, p.Fingerprint = "POST /v1/deployments", approvalFP
	p.Approval = &ledger.ApprovalRequest{Target: "POST /v1/deployments", Summary: "Deploy api:1.4.2 to production",
		Command: []byte(`{"artifact":"api:1.4.2","environment":"production"}`), RequestedBy: "agent-1",
		Approvers: []string{"approver"}, TTL: ttl, ValidFor: validFor}
	return p
}

// decision is alice's decision (an approver, not the requester) on a.
func decision(id string) ledger.DecisionParams {
	return ledger.DecisionParams{ApprovalID: id, Tenant: "acme", Fingerprint: approvalFP, Actor: "alice",
		Roles: []string{"approver", "admin"}, Note: "checked the change"}
}

func getApproval(tb testing.TB, s ledger.Store, id string) *ledger.Approval {
	tb.Helper()
	a, err := s.GetApproval(ctx(tb), id)
	if err != nil {
		tb.Fatalf("get approval %s: %v", id, err)
	}
	return a
}

// testApprovalReserve: one atomic step reserves the operation prepared
// with a pending approval that binds its id, key, fingerprint and expiry;
// retries never open a second one, and nothing takes the operation before
// the decision.
func testApprovalReserve(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	p := ApprovalParams(Long, Long)
	r := reserve(t, s, p)
	if r.Owned() || r.Op.State != ledger.Prepared || r.Op.Approval == nil || r.Op.Approval.Status != ledger.ApprovalPending {
		t.Fatalf("reserved for approval: %+v", r.Op)
	}
	op := get(t, s, r.Op.ID)
	if op.Approval == nil || op.Approval.ID != r.Op.Approval.ID || !op.Approval.ExpiresAt.Equal(op.CreatedAt.Add(Long)) {
		t.Fatalf("stored approval ref %+v, created %v", op.Approval, op.CreatedAt)
	}
	a := getApproval(t, s, op.Approval.ID)
	want := ledger.Approval{ID: op.Approval.ID, OpID: op.ID, Tenant: "acme", Key: p.Key, Route: p.Route,
		Target: p.Approval.Target, Fingerprint: approvalFP, Summary: p.Approval.Summary, Command: p.Approval.Command,
		RequestedBy: "agent-1", Approvers: []string{"approver"}, Status: ledger.ApprovalPending,
		CreatedAt: op.CreatedAt, ExpiresAt: op.Approval.ExpiresAt, ValidFor: Long}
	got := *a
	got.CreatedAt, got.ExpiresAt = got.CreatedAt.UTC(), got.ExpiresAt.UTC()
	want.CreatedAt, want.ExpiresAt = want.CreatedAt.UTC(), want.ExpiresAt.UTC()
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("approval record\n got %+v\nwant %+v", got, want)
	}
	again, err := s.Reserve(c, p)
	if err != nil || again.Created || again.Op.ID != op.ID || again.Op.Approval.ID != a.ID {
		t.Fatalf("identical retry: %+v %v", again, err)
	}
	other := p
	other.Fingerprint = otherFP
	_, err = s.Reserve(c, other)
	wantErr(t, "changed request under the key", err, ledger.ErrFingerprintMismatch)
	if page, err := s.ListApprovals(c, ledger.ApprovalListParams{Tenant: "acme"}); err != nil || len(page.Approvals) != 1 {
		t.Fatalf("retries opened approvals: %d %v", len(page.Approvals), err)
	}
	res, err := s.Acquire(c, ledger.AcquireParams{ID: op.ID, Lease: Long, Actor: "gw"})
	wantErr(t, "acquire while pending", err, ledger.ErrApprovalRequired)
	if res.Op == nil || res.Op.ID != op.ID || get(t, s, op.ID).Fence != 0 {
		t.Fatalf("refused acquire: %+v", res)
	}
	if h := history(t, s, op.ID); len(h) != 1 || h[0].To != ledger.Prepared {
		t.Fatalf("history %+v", h)
	}
	bad := ApprovalParams(Long, Long)
	bad.Lease = Long
	_, err = s.Reserve(c, bad)
	wantErr(t, "approval with a lease", err, ledger.ErrInvalid)
}

// testApprovalDecide: only an approver of the same tenant who did not
// request the operation, echoing its fingerprint, decides it, once; the
// approval is then used by the one acquire that executes it.
func testApprovalDecide(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	r := reserve(t, s, ApprovalParams(Long, time.Hour))
	id := r.Op.Approval.ID
	refusals := []struct {
		name string
		edit func(*ledger.DecisionParams)
		kind error
	}{
		{"the requester", func(d *ledger.DecisionParams) { d.Actor = "agent-1" }, ledger.ErrForbidden},
		{"no approver role", func(d *ledger.DecisionParams) { d.Roles = []string{"agent", "admin"} }, ledger.ErrForbidden},
		{"another tenant", func(d *ledger.DecisionParams) { d.Tenant = "globex" }, ledger.ErrNotFound},
		{"an unknown approval", func(d *ledger.DecisionParams) { d.ApprovalID = "apr_nope" }, ledger.ErrNotFound},
		{"another fingerprint", func(d *ledger.DecisionParams) { d.Fingerprint = otherFP }, ledger.ErrApprovalMismatch},
		{"a malformed fingerprint", func(d *ledger.DecisionParams) { d.Fingerprint = "sha256:abc" }, ledger.ErrInvalid},
		{"no fingerprint", func(d *ledger.DecisionParams) { d.Fingerprint = "" }, ledger.ErrInvalid},
		{"no actor", func(d *ledger.DecisionParams) { d.Actor = "" }, ledger.ErrInvalid},
	}
	for _, ref := range refusals {
		d := decision(id)
		ref.edit(&d)
		_, err := s.Approve(c, d)
		wantErr(t, "approve by "+ref.name, err, ref.kind)
		_, err = s.Deny(c, d)
		wantErr(t, "deny by "+ref.name, err, ref.kind)
	}
	if a := getApproval(t, s, id); a.Status != ledger.ApprovalPending || a.DecidedBy != "" {
		t.Fatalf("refused decisions changed the approval: %+v", a)
	}
	a, err := s.Approve(c, decision(id))
	if err != nil || a.Status != ledger.ApprovalApproved || a.DecidedBy != "alice" || a.Note != "checked the change" ||
		a.DecidedAt.IsZero() || !a.ExpiresAt.Equal(a.DecidedAt.Add(time.Hour)) {
		t.Fatalf("approve: %+v %v", a, err)
	}
	op := get(t, s, r.Op.ID)
	if op.State != ledger.Prepared || op.Approval.Status != ledger.ApprovalApproved || !op.Approval.ExpiresAt.Equal(a.ExpiresAt) {
		t.Fatalf("approved operation: %+v %+v", op, op.Approval)
	}
	_, err = s.Approve(c, decision(id))
	wantErr(t, "second approval", err, ledger.ErrApprovalClosed)
	_, err = s.Deny(c, decision(id))
	wantErr(t, "deny after approval", err, ledger.ErrApprovalClosed)
	res, err := s.Acquire(c, ledger.AcquireParams{ID: op.ID, Lease: Long, Actor: "gw"})
	if err != nil || !res.Owned() || res.Op.Approval.Status != ledger.ApprovalUsed {
		t.Fatalf("acquire after approval: %+v %v", res, err)
	}
	if got := getApproval(t, s, id); got.Status != ledger.ApprovalUsed {
		t.Fatalf("approval after acquire: %s", got.Status)
	}
	_, err = s.Acquire(c, ledger.AcquireParams{ID: op.ID, Lease: Long, Actor: "gw"})
	wantErr(t, "second acquire", err, ledger.ErrIllegalTransition)
}

// testApprovalDeny: a denial fails the operation in the same step, with its
// history row, and nothing can take it after.
func testApprovalDeny(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	r := reserve(t, s, ApprovalParams(Long, Long))
	a, err := s.Deny(c, decision(r.Op.Approval.ID))
	if err != nil || a.Status != ledger.ApprovalDenied || a.DecidedBy != "alice" {
		t.Fatalf("deny: %+v %v", a, err)
	}
	op := get(t, s, r.Op.ID)
	if op.State != ledger.Failed || op.LastError != "approval_denied" || op.Approval.Status != ledger.ApprovalDenied {
		t.Fatalf("denied operation: %+v", op)
	}
	h := history(t, s, op.ID)
	if last := h[len(h)-1]; len(h) != 2 || last.From != ledger.Prepared || last.To != ledger.Failed || last.Actor != "alice" {
		t.Fatalf("history %+v", h)
	}
	_, err = s.Approve(c, decision(a.ID))
	wantErr(t, "approve after denial", err, ledger.ErrApprovalClosed)
	_, err = s.Acquire(c, ledger.AcquireParams{ID: op.ID, Lease: Long, Actor: "gw"})
	wantErr(t, "acquire after denial", err, ledger.ErrIllegalTransition)
}

// waitPast sleeps until t has passed on any store's clock.
// testApprovalConcurrencyKey: a pending or approved operation holds its
// concurrency group; a denial or an expiry frees it.
func testApprovalConcurrencyKey(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	locked := func(p ledger.ReserveParams) ledger.ReserveParams {
		p.ConcurrencyKey = "production"
		return p
	}
	plain := func() ledger.ReserveParams {
		p := locked(Params(Long))
		p.Route = "POST /v1/deployments"
		return p
	}
	free := func(why string) {
		t.Helper()
		r := reserve(t, s, plain())
		if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}}); err != nil {
			t.Fatalf("%s: %v", why, err)
		}
	}
	held := func(why string, holder string) {
		t.Helper()
		res, err := s.Reserve(c, plain())
		wantErr(t, why, err, ledger.ErrConcurrencyLocked)
		if res.Op == nil || res.Op.ID != holder {
			t.Fatalf("%s: holder %+v, want %s", why, res.Op, holder)
		}
	}
	denied := reserve(t, s, locked(ApprovalParams(Long, Long)))
	held("pending", denied.Op.ID)
	if _, err := s.Deny(c, decision(denied.Op.Approval.ID)); err != nil {
		t.Fatal(err)
	}
	free("after a denial")
	// Approved, it holds the group while its approval is good: valid for
	// an hour, so that no pause of a loaded machine can end it before the
	// check; it is then run and completed, which frees the group.
	good := reserve(t, s, locked(ApprovalParams(Long, Long)))
	if _, err := s.Approve(c, decision(good.Op.Approval.ID)); err != nil {
		t.Fatal(err)
	}
	held("approved", good.Op.ID)
	run, err := s.Acquire(c, ledger.AcquireParams{ID: good.Op.ID, Lease: Long, Actor: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(c, *run.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	free("after its run")
	// Approved and never used within valid_for, it frees the group once
	// expired: only the time's passing matters here, not how soon.
	approved := reserve(t, s, locked(ApprovalParams(Long, 50*time.Millisecond)))
	a, err := s.Approve(c, decision(approved.Op.Approval.ID))
	if err != nil {
		t.Fatal(err)
	}
	waitPast(a.ExpiresAt)
	if n, err := s.ExpireApprovals(c, 10); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	free("after an expiry")
	// A new approval for the expired operation must wait for the group.
	r := reserve(t, s, plain())
	req := *ApprovalParams(Long, Long).Approval
	_, err = s.ReopenApproval(c, ledger.ReopenParams{OpID: approved.Op.ID, Previous: a.ID, Request: req, Actor: "gw"})
	wantErr(t, "reopen while another holds the group", err, ledger.ErrConcurrencyLocked)
	if op := get(t, s, approved.Op.ID); op.Approval.ID != a.ID {
		t.Fatalf("refused reopen changed the approval: %+v", op.Approval)
	}
	if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
}

// testApprovalList: approvals page by tenant and status, in creation order.
func testApprovalList(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	var pending []string
	for i := range 5 {
		r := reserve(t, s, ApprovalParams(Long, Long))
		if i%2 == 0 {
			pending = append(pending, r.Op.Approval.ID)
		} else if _, err := s.Approve(c, decision(r.Op.Approval.ID)); err != nil {
			t.Fatal(err)
		}
	}
	globex := ApprovalParams(Long, Long)
	globex.Tenant = "globex"
	reserve(t, s, globex)
	var got []string
	after := ""
	for {
		page, err := s.ListApprovals(c, ledger.ApprovalListParams{Tenant: "acme", Status: ledger.ApprovalPending,
			After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page.Approvals {
			got = append(got, a.ID)
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if !slices.Equal(got, pending) {
		t.Fatalf("pending approvals %v, want %v", got, pending)
	}
	all, err := s.ListApprovals(c, ledger.ApprovalListParams{Tenant: "acme"})
	if err != nil || len(all.Approvals) != 5 {
		t.Fatalf("all of acme's: %d %v", len(all.Approvals), err)
	}
}

// testApprovalPurge: purging an operation takes its approvals with it.
func testApprovalPurge(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	p := ApprovalParams(Long, Long)
	p.Retention = Lapsing
	r := reserve(t, s, p)
	if _, err := s.Deny(c, decision(r.Op.Approval.ID)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	if n, err := s.Purge(c, 10); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	_, err := s.GetApproval(c, r.Op.Approval.ID)
	wantErr(t, "approval of a purged operation", err, ledger.ErrNotFound)
}
