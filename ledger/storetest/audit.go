package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// events lists an operation's audit events as "kind from>to actor".
func events(tb testing.TB, s ledger.Store, opID string) []string {
	tb.Helper()
	es, err := s.AuditEvents(ctx(tb), ledger.AuditParams{OperationID: opID})
	if err != nil {
		tb.Fatalf("audit events of %s: %v", opID, err)
	}
	var out []string
	for _, e := range es {
		out = append(out, string(e.Kind)+" "+e.From+">"+e.To+" "+e.Actor)
	}
	return out
}

// testAuditTransitions: every transition, on every write path, and every
// approval granted or expired, is an audit event written with it, named
// for what it records; events name their operation, key and fingerprint,
// carry the upstream's status on completion, and outlive a purge.
func testAuditTransitions(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	r := reserve(t, s, Params(Long))
	if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201},
		ResultRef: "T-9"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"forwarded >executing test-gateway", "succeeded executing>succeeded test-gateway"}
	if got := events(t, s, r.Op.ID); !slices.Equal(got, want) {
		t.Fatalf("reserve and complete: %v, want %v", got, want)
	}
	es, _ := s.AuditEvents(c, ledger.AuditParams{OperationID: r.Op.ID})
	last := es[len(es)-1]
	if last.Tenant != "acme" || last.Key != r.Op.Key || last.Fingerprint != r.Op.Fingerprint || last.UpstreamStatus != 201 ||
		last.ResultRef != "T-9" || last.Seq != -1 || last.At.IsZero() || es[0].UpstreamStatus != 0 {
		t.Fatalf("completion event %+v", last)
	}

	// Released, re-run, lost, swept, resolved.
	r = reserve(t, s, Params(Long))
	if _, err := s.Release(c, *r.Lease, ledger.Note{Reason: "refused"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(c, ledger.AcquireParams{ID: r.Op.ID, Lease: Lapsing, Actor: "gw-2"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	if n, err := s.ExpireLeases(c, 10); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	if _, err := s.Resolve(c, ledger.ResolveParams{ID: res.Op.ID, To: ledger.Failed, Actor: "alice", Note: "checked"}); err != nil {
		t.Fatal(err)
	}
	want = []string{"forwarded >executing test-gateway", "released executing>prepared test-gateway",
		"forwarded prepared>executing gw-2", "unknown executing>unknown " + ledger.ActorLeaseExpiry,
		"resolved unknown>failed alice"}
	if got := events(t, s, r.Op.ID); !slices.Equal(got, want) {
		t.Fatalf("a troubled operation: %v, want %v", got, want)
	}

	// Approved, expired, reopened, denied.
	p := ApprovalParams(50*time.Millisecond, Long)
	p.Retention = Lapsing
	ap := reserve(t, s, p)
	waitPast(ap.Op.Approval.ExpiresAt)
	if _, err := s.ExpireApprovals(c, 10); err != nil {
		t.Fatal(err)
	}
	req := *ApprovalParams(Long, Long).Approval
	op, err := s.ReopenApproval(c, ledger.ReopenParams{OpID: ap.Op.ID, Previous: ap.Op.Approval.ID, Request: req, Actor: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Approve(c, decision(op.Approval.ID)); err != nil {
		t.Fatal(err)
	}
	res, err = s.Acquire(c, ledger.AcquireParams{ID: op.ID, Lease: Long, Actor: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(c, *res.Lease, ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	want = []string{"approval_requested >prepared test-gateway", "approval_expired > " + ledger.ActorApprovalExpiry,
		"approved > alice", "forwarded prepared>executing gw", "succeeded executing>succeeded gw"}
	if got := events(t, s, op.ID); !slices.Equal(got, want) {
		t.Fatalf("an approved operation: %v, want %v", got, want)
	}
	denied := reserve(t, s, ApprovalParams(Long, Long))
	if _, err := s.Deny(c, decision(denied.Op.Approval.ID)); err != nil {
		t.Fatal(err)
	}
	if got := events(t, s, denied.Op.ID); !slices.Equal(got, []string{"approval_requested >prepared test-gateway",
		"denied prepared>failed alice"}) {
		t.Fatalf("a denied operation: %v", got)
	}
	decisionNotes(t, s, op.ID, denied.Op.ID)

	// Purged, its story stays.
	time.Sleep(2 * time.Millisecond)
	if n, err := s.Purge(c, 100); err != nil || n == 0 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if _, err := s.Get(c, op.ID); err == nil {
		t.Fatal("not purged")
	}
	if got := events(t, s, op.ID); len(got) != 5 {
		t.Fatalf("after the purge: %v", got)
	}
	all, err := s.AuditEvents(c, ledger.AuditParams{Tenant: "acme", Limit: 2})
	if err != nil || len(all) != 2 || all[0].ID >= all[1].ID {
		t.Fatalf("a tenant's events, paged: %+v %v", all, err)
	}
	for _, e := range all {
		if !slices.Contains(audit.Kinds, e.Kind) {
			t.Fatalf("kind %q is not docs/design.md's", e.Kind)
		}
	}
}

// decisionNotes: the approver's note is in the audit log, with the
// approved and the denied event that record the decision.
func decisionNotes(t *testing.T, s ledger.Store, approved, denied string) {
	t.Helper()
	note := decision("").Note
	for id, kind := range map[string]audit.Kind{approved: audit.Approved, denied: audit.Denied} {
		es, err := s.AuditEvents(ctx(t), ledger.AuditParams{OperationID: id})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(es, func(e audit.Event) bool { return e.Kind == kind })
		if i < 0 || !strings.HasSuffix(es[i].Reason, ": "+note) {
			t.Fatalf("the %s event does not hold the approver's note %q: %+v", kind, note, es)
		}
	}
}
