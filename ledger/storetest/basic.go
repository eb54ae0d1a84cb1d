package storetest

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

func testReserve(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)

	p := Params(Long)
	p.BusinessKey, p.ConcurrencyKey = "evt-1", "production"
	r := reserve(t, s, p)
	op := r.Op
	if op.State != ledger.Executing || op.Attempts != 1 || op.Fence != 1 || !r.Owned() {
		t.Fatalf("reserve with lease: state %s attempts %d fence %d owned %v", op.State, op.Attempts, op.Fence, r.Owned())
	}
	if len(op.ID) != 29 || op.ID[:3] != "op_" {
		t.Errorf("id %q: want op_ and a ULID", op.ID)
	}
	if op.Tenant != p.Tenant || op.Key != p.Key || op.Route != p.Route || op.Fingerprint != p.Fingerprint ||
		op.BusinessKey != "evt-1" || op.ConcurrencyKey != "production" {
		t.Errorf("reserve stored %+v", op)
	}
	// The lease is the store's now + lease, read in the same statement as
	// updated_at: the store's clock, not the caller's.
	if got := op.LeaseUntil.Sub(op.UpdatedAt); got != Long {
		t.Errorf("lease_until - updated_at = %v, want %v", got, Long)
	}
	if r.Lease.Until != op.LeaseUntil || r.Lease.Fence != 1 || r.Lease.Token == "" || r.Lease.OpID != op.ID {
		t.Errorf("lease %+v for op %+v", r.Lease, op)
	}
	if d := time.Since(op.CreatedAt); d > time.Minute || d < -time.Minute {
		t.Errorf("created_at %v is far from now", op.CreatedAt)
	}
	h := history(t, s, op.ID)
	if len(h) != 1 || h[0].From != ledger.None || h[0].To != ledger.Executing || h[0].Actor != "test-gateway" {
		t.Fatalf("history after reserve: %+v", h)
	}

	again, err := s.Reserve(c, p)
	if err != nil {
		t.Fatalf("second reserve: %v", err)
	}
	if again.Created || again.Owned() || again.Op.ID != op.ID || again.Op.State != ledger.Executing {
		t.Fatalf("second reserve: %+v", again)
	}
	if n := len(history(t, s, op.ID)); n != 1 {
		t.Errorf("second reserve wrote history: %d rows", n)
	}

	prep := reserve(t, s, Params(0))
	if prep.Op.State != ledger.Prepared || prep.Owned() || prep.Op.Attempts != 0 || prep.Op.Fence != 0 ||
		!prep.Op.LeaseUntil.IsZero() {
		t.Fatalf("reserve only: %+v owned %v", prep.Op, prep.Owned())
	}

	byKey, err := s.GetByKey(c, clientKey(p.Tenant, p.Key))
	if err != nil || byKey.ID != op.ID {
		t.Fatalf("get by key: %v %v", byKey, err)
	}
	if _, err := s.Get(c, "op_missing"); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("get missing: %v", err)
	}
	if _, err := s.GetByKey(c, clientKey("acme", "missing")); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("get by missing key: %v", err)
	}
	if err := s.Ping(c); err != nil {
		t.Errorf("ping: %v", err)
	}
}

// testTwoCommits: the common write path, a new key executed at once, costs
// exactly two commits: reserve-with-lease, then complete.
func testTwoCommits(t *testing.T, b Backend) {
	if b.Commits == nil {
		t.Skip("the backend counts no commits (Backend.Commits)")
	}
	s := b.Fresh(t)
	c := ctx(t)
	reserve(t, s, Params(Long)) // warm up: first statements may prepare
	before := b.Commits()
	r := reserve(t, s, Params(Long))
	if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: benchResponse}); err != nil {
		t.Fatal(err)
	}
	if n := b.Commits() - before; n != 2 {
		t.Fatalf("reserve-with-lease + complete cost %d commits, want 2", n)
	}
}

func testValidation(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	bad := map[string]func(*ledger.ReserveParams){
		"no tenant":      func(p *ledger.ReserveParams) { p.Tenant = "" },
		"no key":         func(p *ledger.ReserveParams) { p.Key = "" },
		"long key":       func(p *ledger.ReserveParams) { p.Key = string(bytes.Repeat([]byte("k"), 256)) },
		"no route":       func(p *ledger.ReserveParams) { p.Route = "" },
		"no fingerprint": func(p *ledger.ReserveParams) { p.Fingerprint = "" },
		"no retention":   func(p *ledger.ReserveParams) { p.Retention = 0 },
		"negative lease": func(p *ledger.ReserveParams) { p.Lease = -time.Second },
		"no actor":       func(p *ledger.ReserveParams) { p.Actor = "" },
		"sub-µs lease":   func(p *ledger.ReserveParams) { p.Lease = time.Nanosecond },
		"sub-µs retain":  func(p *ledger.ReserveParams) { p.Retention = time.Nanosecond },
		"NUL in tenant":  func(p *ledger.ReserveParams) { p.Tenant = "ac\x00me" },
		"bad UTF-8 key":  func(p *ledger.ReserveParams) { p.Key = "k\xff" },
		"NUL in key":     func(p *ledger.ReserveParams) { p.Key = "k\x00" },
		"bad UTF-8 bkey": func(p *ledger.ReserveParams) { p.BusinessKey = "\xfe" },
		"no namespace":   func(p *ledger.ReserveParams) { p.Namespace = "" },
		"long namespace": func(p *ledger.ReserveParams) { p.Namespace = string(bytes.Repeat([]byte("n"), 256)) },
		"NUL in ns":      func(p *ledger.ReserveParams) { p.Namespace = "consumer/\x00" },
		"bad UTF-8 ns":   func(p *ledger.ReserveParams) { p.Namespace = "consumer/\xff" },
		"no kind":        func(p *ledger.ReserveParams) { p.Kind = "" },
		"unknown kind":   func(p *ledger.ReserveParams) { p.Kind = "queue" },
	}
	for name, mutate := range bad {
		p := Params(Long)
		mutate(&p)
		_, err := s.Reserve(c, p)
		wantErr(t, name, err, ledger.ErrInvalid)
	}
	page, err := s.List(c, ledger.ListParams{})
	if err != nil || len(page.Operations) != 0 {
		t.Fatalf("invalid reservations left rows: %v %v", states(page.Operations), err)
	}
	op, l := reach(t, s, ledger.Executing)
	_, err = s.Complete(c, l, ledger.Outcome{State: ledger.Unknown, Response: &ledger.Response{Status: 200}})
	wantErr(t, "complete to unknown", err, ledger.ErrInvalid)
	_, err = s.Complete(c, l, ledger.Outcome{State: ledger.Succeeded})
	wantErr(t, "complete without a response", err, ledger.ErrInvalid)
	_, err = s.Release(c, l, ledger.Note{Reason: "bad\x00text"})
	wantErr(t, "release with a NUL in its reason", err, ledger.ErrInvalid)
	_, err = s.Heartbeat(c, l, 0)
	wantErr(t, "zero heartbeat", err, ledger.ErrInvalid)
	_, err = s.Acquire(c, ledger.AcquireParams{ID: op.ID, Actor: "x"})
	wantErr(t, "acquire without lease", err, ledger.ErrInvalid)
	_, err = s.Resolve(c, ledger.ResolveParams{ID: op.ID, To: ledger.Succeeded, Note: "n"})
	wantErr(t, "resolve without actor", err, ledger.ErrInvalid)
	_, err = s.Resolve(c, ledger.ResolveParams{ID: op.ID, To: ledger.Succeeded, Actor: "alice"})
	wantErr(t, "resolve without note", err, ledger.ErrInvalid)
	_, err = s.ExpireLeases(c, 0)
	wantErr(t, "expire with zero limit", err, ledger.ErrInvalid)
	_, err = s.Purge(c, 0)
	wantErr(t, "purge with zero limit", err, ledger.ErrInvalid)
	if got := get(t, s, op.ID); got.State != ledger.Executing || len(history(t, s, op.ID)) != 1 {
		t.Fatalf("refused calls changed the operation: %s", got.State)
	}
}

func testFingerprintMismatch(t *testing.T, b Backend) {
	s := b.Fresh(t)
	for _, st := range ledger.States {
		op, _ := reach(t, s, st)
		before := history(t, s, op.ID)
		p := Params(Long)
		p.Key, p.Fingerprint = op.Key, "sha256:bbbb"
		r, err := s.Reserve(ctx(t), p)
		wantErr(t, "reserve with another fingerprint in "+string(st), err, ledger.ErrFingerprintMismatch)
		if r.Op == nil || r.Op.ID != op.ID || r.Owned() || r.Created {
			t.Fatalf("%s: mismatch must return the existing operation only: %+v", st, r)
		}
		after := get(t, s, op.ID)
		if after.State != st || after.Fingerprint != "sha256:aaaa" || len(history(t, s, op.ID)) != len(before) {
			t.Fatalf("%s: mismatch changed the operation: %s %s", st, after.State, after.Fingerprint)
		}
	}
}

func testTenants(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	p := Params(Long)
	a := reserve(t, s, p)
	p.Tenant = "globex"
	p.Fingerprint = "sha256:other" // a different tenant's request never mismatches ours
	g := reserve(t, s, p)
	if a.Op.ID == g.Op.ID {
		t.Fatal("the same key in two tenants is one operation")
	}
	for tenant, want := range map[string]string{"acme": a.Op.ID, "globex": g.Op.ID} {
		op, err := s.GetByKey(c, clientKey(tenant, p.Key))
		if err != nil || op.ID != want || op.Tenant != tenant {
			t.Fatalf("get by key in %s: %v %v", tenant, op, err)
		}
	}
	page, err := s.List(c, ledger.ListParams{Tenant: "globex"})
	if err != nil || len(page.Operations) != 1 || page.Operations[0].ID != g.Op.ID {
		t.Fatalf("list globex: %v %v", ids(page.Operations), err)
	}
	// Retries in each tenant find their own operation: no replay across
	// tenants, and no fingerprint mismatch against the other's request.
	for _, want := range []ledger.Reservation{a, g} {
		p.Tenant, p.Fingerprint = want.Op.Tenant, want.Op.Fingerprint
		r, err := s.Reserve(c, p)
		if err != nil || r.Op.ID != want.Op.ID || r.Created {
			t.Fatalf("retry in %s: %+v %v", p.Tenant, r.Op, err)
		}
	}
}

func testStoredResponse(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	body := []byte("{\"id\":\"T-1\"}\n\x00\xff binary survives")
	want := &ledger.Response{Status: 201, Body: body, Header: http.Header{
		"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}, "Location": {"/v1/tickets/T-1"}}}
	_, l := reach(t, s, ledger.Executing)
	op, err := s.Complete(c, l, ledger.Outcome{State: ledger.Succeeded, Response: want, ResultRef: "T-1", Reason: "201"})
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []*ledger.Operation{op, get(t, s, op.ID)} {
		r := got.Response
		if r == nil || r.Status != 201 || !bytes.Equal(r.Body, body) || got.ResultRef != "T-1" {
			t.Fatalf("stored response %+v", r)
		}
		if len(r.Header) != 3 || http.Header(r.Header).Get("Location") != "/v1/tickets/T-1" || len(r.Header["Set-Cookie"]) != 2 {
			t.Fatalf("stored headers %v", r.Header)
		}
		if got.LeaseUntil != (time.Time{}) {
			t.Errorf("a final operation keeps a lease: %v", got.LeaseUntil)
		}
	}
	_, l = reach(t, s, ledger.Executing)
	op, err = s.Complete(c, l, ledger.Outcome{State: ledger.Failed, Response: &ledger.Response{Status: 422}, ErrorCode: "upstream_422"})
	if err != nil {
		t.Fatal(err)
	}
	if op.Response == nil || op.Response.Status != 422 || len(op.Response.Body) != 0 || op.LastError != "upstream_422" {
		t.Fatalf("empty-body response: %+v %q", op.Response, op.LastError)
	}
}

func testList(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	var all []string
	for i := range 7 {
		op, _ := reach(t, s, ledger.States[i%len(ledger.States)])
		all = append(all, op.ID)
	}
	other := Params(Long)
	other.Tenant = "globex"
	reserve(t, s, other)

	var got []string
	after := ""
	for pages := 0; ; pages++ {
		page, err := s.List(c, ledger.ListParams{Tenant: "acme", After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(page.Operations)...)
		if page.Next == "" {
			if pages != 2 || len(page.Operations) != 1 {
				t.Fatalf("pages of 3 over 7 rows: ended on page %d with %d rows", pages, len(page.Operations))
			}
			break
		}
		after = page.Next
	}
	if len(got) != 7 {
		t.Fatalf("paged %d operations, want 7", len(got))
	}
	for i := range got {
		if got[i] != all[i] {
			t.Fatalf("page order %v, want creation order %v", got, all)
		}
	}
	page, err := s.List(c, ledger.ListParams{Tenant: "acme", State: ledger.Executing})
	if err != nil || len(page.Operations) != 2 || page.Next != "" {
		t.Fatalf("list executing: %v %v", states(page.Operations), err)
	}
	page, err = s.List(c, ledger.ListParams{State: ledger.Executing})
	if err != nil || len(page.Operations) != 3 {
		t.Fatalf("list executing in every tenant: %v %v", states(page.Operations), err)
	}
}
