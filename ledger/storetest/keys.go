package storetest

import (
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// testBusinessKey: one operation per (tenant, route, business key), across
// idempotency keys; other routes and tenants are other identities.
func testBusinessKey(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	p := Params(Long)
	p.BusinessKey = "alert-77"
	first := reserve(t, s, p)

	dup := Params(Long)
	dup.BusinessKey, dup.Fingerprint = "alert-77", "sha256:paraphrased"
	r, err := s.Reserve(c, dup)
	if err != nil || !r.Duplicate || r.Created || r.Owned() || r.Op.ID != first.Op.ID {
		t.Fatalf("same business key, another key: %+v %v", r, err)
	}
	for name, mutate := range map[string]func(*ledger.ReserveParams){
		"another route":  func(p *ledger.ReserveParams) { p.Route = "/v1/incidents" },
		"another tenant": func(p *ledger.ReserveParams) { p.Tenant = "globex" },
		"another value":  func(p *ledger.ReserveParams) { p.BusinessKey = "alert-78" },
	} {
		other := Params(Long)
		other.BusinessKey = "alert-77"
		mutate(&other)
		if r := reserve(t, s, other); r.Duplicate {
			t.Fatalf("%s: a duplicate", name)
		}
	}
	// The business identity outlives the first operation's outcome.
	if _, err := s.Complete(c, *first.Lease, ledger.Outcome{State: ledger.Succeeded,
		Response: &ledger.Response{Status: 201}}); err != nil {
		t.Fatal(err)
	}
	again := Params(Long)
	again.BusinessKey = "alert-77"
	if r, err := s.Reserve(c, again); err != nil || !r.Duplicate || r.Op.State != ledger.Succeeded {
		t.Fatalf("after completion: %+v %v", r, err)
	}
}

// testConcurrencyKey: at most one live operation per concurrency group.
func testConcurrencyKey(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	group := func() ledger.ReserveParams {
		p := Params(Long)
		p.ConcurrencyKey = "production"
		return p
	}
	holder := reserve(t, s, group())
	r, err := s.Reserve(c, group())
	wantErr(t, "second live operation in the group", err, ledger.ErrConcurrencyLocked)
	if r.Op == nil || r.Op.ID != holder.Op.ID || r.Created {
		t.Fatalf("the refusal must name the holder: %+v", r)
	}
	other := group()
	other.ConcurrencyKey = "staging"
	reserve(t, s, other)

	// Unknown still holds the group: nobody knows whether it is deploying.
	if _, err := s.MarkUnknown(c, *holder.Lease, ledger.Note{Reason: "timeout"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Reserve(c, group())
	wantErr(t, "while the holder is unknown", err, ledger.ErrConcurrencyLocked)

	// Resolved: the group is free, and the next one takes it.
	if _, err := s.Resolve(c, ledger.ResolveParams{ID: holder.Op.ID, To: ledger.Succeeded, Actor: "alice",
		Note: "deployed"}); err != nil {
		t.Fatal(err)
	}
	next := reserve(t, s, group())
	// Released (definitely not applied), it frees the group; taken again
	// while another holds it, it is refused.
	if _, err := s.Release(c, *next.Lease, ledger.Note{Reason: "dial refused"}); err != nil {
		t.Fatal(err)
	}
	third := reserve(t, s, group())
	_, err = s.Acquire(c, ledger.AcquireParams{ID: next.Op.ID, Lease: Long, Actor: "w2"})
	wantErr(t, "re-acquire while another holds the group", err, ledger.ErrConcurrencyLocked)
	if op := get(t, s, next.Op.ID); op.State != ledger.Prepared {
		t.Fatalf("refused acquire moved the operation to %s", op.State)
	}
	if _, err := s.Complete(c, *third.Lease, ledger.Outcome{State: ledger.Failed,
		Response: &ledger.Response{Status: 409}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(c, ledger.AcquireParams{ID: next.Op.ID, Lease: Long, Actor: "w2"}); err != nil {
		t.Fatalf("re-acquire once the group is free: %v", err)
	}
}
