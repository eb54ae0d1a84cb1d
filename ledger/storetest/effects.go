package storetest

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// runEffects runs the tests of multi-effect operations and the outbox.
func runEffects(t *testing.T, b Backend) {
	t.Run("EffectsEnqueue", inParallel(b, testEffectsEnqueue))
	t.Run("EffectsAllOrNothing", inParallel(b, testEffectsAllOrNothing))
	t.Run("EffectsInTx", inParallel(b, testEffectsInTx))
	t.Run("EffectsInOrder", inParallel(b, testEffectsInOrder))
	t.Run("EffectsFenced", inParallel(b, testEffectsFenced))
	t.Run("EffectsParked", inParallel(b, testEffectsParked))
	t.Run("EffectsTargets", inParallel(b, testEffectsTargets))
	t.Run("EffectsPurge", inParallel(b, testEffectsPurge))
	t.Run("EffectsLateResult", inParallel(b, testEffectsLateResult))
	t.Run("EffectsSettle", inParallel(b, testEffectsSettle))
	t.Run("EffectsFailedResumes", inParallel(b, testEffectsFailedResumes))
	t.Run("EffectsEnqueuedAtOnce", inParallel(b, testEffectsEnqueuedAtOnce))
	t.Run("RaceEffectClaims", inParallel(b, testRaceEffectClaims))
}

// effectsOf returns n effects of one new operation, named step-1 … step-n.
func effectsOf(n int, target string) []ledger.EffectParams {
	opKey := fmt.Sprintf("dossier-%d:v5", seq.Add(1))
	out := make([]ledger.EffectParams, n)
	for i := range out {
		out[i] = ledger.EffectParams{Tenant: "acme", OperationKey: opKey, Name: fmt.Sprintf("step-%d", i+1),
			Target: target, Path: fmt.Sprintf("/v1/steps/%d", i+1),
			Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(fmt.Sprintf(`{"n":%d}`, i+1))}
	}
	return out
}

func enqueue(tb testing.TB, s ledger.Steps, effects []ledger.EffectParams) []*ledger.Effect {
	tb.Helper()
	out, err := s.Enqueue(ctx(tb), effects)
	if err != nil || len(out) != len(effects) {
		tb.Fatalf("enqueue: %d effects, %v", len(out), err)
	}
	return out
}

// testEffectsEnqueue: each effect gets its derived key, prepared, in
// order; the same effects enqueued again are the ones there; a changed one
// under a taken key, and bad ones, are refused.
func testEffectsEnqueue(t *testing.T, b Backend) {
	s := b.Fresh(t)
	in := effectsOf(3, "crm")
	got := enqueue(t, s, in)
	for i, e := range got {
		if e.Key != in[i].OperationKey+"/"+in[i].Name || e.State != ledger.Prepared || e.Method != "POST" ||
			e.Attempts != 0 || e.NextAt.IsZero() || !bytes.Equal(e.Body, in[i].Body) ||
			http.Header(e.Header).Get("Content-Type") != "application/json" || (i > 0 && e.Seq <= got[i-1].Seq) {
			t.Fatalf("effect %d: %+v", i, e)
		}
	}
	again := enqueue(t, s, in)
	for i := range got {
		if again[i].ID != got[i].ID {
			t.Fatalf("enqueued again: %s, want the one there, %s", again[i].ID, got[i].ID)
		}
	}
	listed, err := s.Effects(ctx(t), clientKey("acme", in[0].OperationKey))
	if err != nil || len(listed) != 3 || listed[0].ID != got[0].ID || listed[2].ID != got[2].ID {
		t.Fatalf("effects: %v %v", listed, err)
	}
	if other, err := s.Effects(ctx(t), clientKey("globex", in[0].OperationKey)); err != nil || len(other) != 0 {
		t.Fatalf("another tenant's effects: %v %v", other, err)
	}
	one, err := s.GetEffect(ctx(t), got[1].ID)
	if err != nil || one.Key != got[1].Key {
		t.Fatalf("get effect: %+v %v", one, err)
	}
	changed := in[1]
	changed.Body = []byte(`{"n":99}`)
	_, err = s.Enqueue(ctx(t), []ledger.EffectParams{changed})
	wantErr(t, "a changed effect under a taken key", err, ledger.ErrFingerprintMismatch)
	for what, bad := range map[string]func(*ledger.EffectParams){
		"a name with /": func(p *ledger.EffectParams) { p.Name = "a/b" },
		"no target":     func(p *ledger.EffectParams) { p.Target = "" },
		"no tenant":     func(p *ledger.EffectParams) { p.Tenant = "" },
		"a bad path":    func(p *ledger.EffectParams) { p.Path = "v1/x" },
		"a bad header":  func(p *ledger.EffectParams) { p.Header = map[string][]string{"X-A": {"a\r\nb"}} },
		"a long key":    func(p *ledger.EffectParams) { p.OperationKey = string(bytes.Repeat([]byte("k"), 300)) },
		"a large body":  func(p *ledger.EffectParams) { p.Body = make([]byte, ledger.MaxEffectBody+1) },
	} {
		p := effectsOf(1, "crm")[0]
		bad(&p)
		_, err := s.Enqueue(ctx(t), []ledger.EffectParams{p})
		wantErr(t, what, err, ledger.ErrInvalid)
	}
}

// testEffectsAllOrNothing: a batch with one refused effect writes none.
func testEffectsAllOrNothing(t *testing.T, b Backend) {
	s := b.Fresh(t)
	first := effectsOf(1, "crm")
	enqueue(t, s, first)
	changed := first[0]
	changed.Body = []byte(`{"other":true}`)
	fresh := effectsOf(1, "crm")[0]
	_, err := s.Enqueue(ctx(t), []ledger.EffectParams{fresh, changed})
	wantErr(t, "a batch with a changed effect", err, ledger.ErrFingerprintMismatch)
	if got, err := s.Effects(ctx(t), clientKey("acme", fresh.OperationKey)); err != nil || len(got) != 0 {
		t.Fatalf("the batch's other effect was written: %v %v", got, err)
	}
}

// testEffectsInTx: effects enqueued in a business transaction commit with
// its write, or roll back with it.
func testEffectsInTx(t *testing.T, b Backend) {
	needTx(t, b)
	s := b.Fresh(t)
	for _, commit := range []bool{false, true} {
		tx := b.Begin(t, s)
		in := effectsOf(2, "crm")
		enqueue(t, tx.Steps, in)
		if err := tx.Write(in[0].OperationKey); err != nil {
			t.Fatal(err)
		}
		end := map[bool]func() error{false: tx.Rollback, true: tx.Commit}[commit]
		if err := end(); err != nil {
			t.Fatal(err)
		}
		got, err := s.Effects(ctx(t), clientKey("acme", in[0].OperationKey))
		want := map[bool]int{false: 0, true: 2}[commit]
		if err != nil || len(got) != want || b.Rows(t, s, in[0].OperationKey) != want/2 {
			t.Fatalf("commit=%t: %d effects, %d rows, want %d effects (%v)", commit, len(got),
				b.Rows(t, s, in[0].OperationKey), want, err)
		}
	}
}

// claimEffects claims what is due of target "crm", with a long lease.
func claimEffects(tb testing.TB, s ledger.Store, limit int) []ledger.EffectClaim {
	tb.Helper()
	cs, err := s.ClaimEffects(ctx(tb), ledger.EffectClaimParams{Targets: []string{"crm"}, Limit: limit, Lease: Long})
	if err != nil {
		tb.Fatalf("claim effects: %v", err)
	}
	return cs
}

func result(tb testing.TB, s ledger.Store, c ledger.EffectClaim, o ledger.EffectOutcome) *ledger.Effect {
	tb.Helper()
	e, err := s.EffectResult(ctx(tb), c.Lease, o)
	if err != nil {
		tb.Fatalf("effect result %s: %v", c.Effect.Key, err)
	}
	return e
}

// testEffectsInOrder: an operation's effects go out one after the other,
// each once every earlier one succeeded; one whose delivery is unknown is
// due again (at least once, the same key), and a failed one holds the rest
// back. Test 11: one effect succeeds and the next fails.
func testEffectsInOrder(t *testing.T, b Backend) {
	s := b.Fresh(t)
	in := enqueue(t, s, effectsOf(4, "crm"))
	c := claimEffects(t, s, 10)
	if len(c) != 1 || c[0].Effect.ID != in[0].ID || c[0].Effect.State != ledger.Executing || c[0].Effect.Attempts != 1 {
		t.Fatalf("first claim: %+v", c)
	}
	if more := claimEffects(t, s, 10); len(more) != 0 {
		t.Fatalf("claimed %s while the first is executing", more[0].Effect.Key)
	}
	e := result(t, s, c[0], ledger.EffectOutcome{State: ledger.Succeeded, Status: 201, ResultRef: "pdf-1"})
	if e.State != ledger.Succeeded || e.Status != 201 || e.ResultRef != "pdf-1" || !e.NextAt.IsZero() {
		t.Fatalf("succeeded: %+v", e)
	}
	c = claimEffects(t, s, 10)
	if len(c) != 1 || c[0].Effect.ID != in[1].ID {
		t.Fatalf("second claim: %+v", c)
	}
	result(t, s, c[0], ledger.EffectOutcome{State: ledger.Unknown, ErrorCode: "target_timeout"})
	c = claimEffects(t, s, 10)
	if len(c) != 1 || c[0].Effect.ID != in[1].ID || c[0].Effect.Attempts != 2 || c[0].Lease.Fence != 2 {
		t.Fatalf("an unknown delivery is due again: %+v", c)
	}
	result(t, s, c[0], ledger.EffectOutcome{State: ledger.Succeeded, Status: 200})
	c = claimEffects(t, s, 10)
	if len(c) != 1 || c[0].Effect.ID != in[2].ID {
		t.Fatalf("third claim: %+v", c)
	}
	e = result(t, s, c[0], ledger.EffectOutcome{State: ledger.Failed, Status: 422, ErrorCode: "http_422"})
	if e.State != ledger.Failed || e.LastError != "http_422" {
		t.Fatalf("failed: %+v", e)
	}
	if more := claimEffects(t, s, 10); len(more) != 0 {
		t.Fatalf("claimed %s after a failed effect", more[0].Effect.Key)
	}
	all, err := s.Effects(ctx(t), clientKey("acme", in[0].OperationKey))
	if err != nil || all[0].Attempts != 1 || all[1].Attempts != 2 || all[3].State != ledger.Prepared || all[3].Attempts != 0 {
		t.Fatalf("effects: %+v %v", all, err)
	}
}

// testEffectsFenced: a delivery whose lease lapsed is unknown, and the
// next claim takes it with a larger fence; the first relay's late result
// is refused, the second's recorded, and a repeat of a recorded result
// (its reply lost) is no error.
func testEffectsFenced(t *testing.T, b Backend) {
	s := b.Fresh(t)
	in := enqueue(t, s, effectsOf(1, "crm"))
	first, err := s.ClaimEffects(ctx(t), ledger.EffectClaimParams{Targets: []string{"crm"}, Limit: 1, Lease: Lapsing})
	if err != nil || len(first) != 1 {
		t.Fatalf("first claim: %v %v", first, err)
	}
	time.Sleep(5 * time.Millisecond)
	second := claimEffects(t, s, 1)
	if len(second) != 1 || second[0].Effect.ID != in[0].ID || second[0].Lease.Fence <= first[0].Lease.Fence ||
		second[0].Effect.LastError != "lease_expired" {
		t.Fatalf("second claim: %+v", second)
	}
	_, err = s.EffectResult(ctx(t), first[0].Lease, ledger.EffectOutcome{State: ledger.Succeeded, Status: 200})
	wantErr(t, "a fenced relay's result", err, ledger.ErrStaleOwner)
	done := ledger.EffectOutcome{State: ledger.Succeeded, Status: 201}
	result(t, s, second[0], done)
	again := result(t, s, second[0], done)
	if again.State != ledger.Succeeded {
		t.Fatalf("the result repeated: %+v", again)
	}
	_, err = s.EffectResult(ctx(t), second[0].Lease, ledger.EffectOutcome{State: ledger.Failed, Status: 500})
	wantErr(t, "another result after the first", err, ledger.ErrIllegalTransition)
}

// testEffectsParked: a delivery out of attempts is parked for an operator,
// who may make it due again, or settle it; not an executing one, nor
// another tenant's.
func testEffectsParked(t *testing.T, b Backend) {
	s := b.Fresh(t)
	in := enqueue(t, s, effectsOf(2, "crm"))
	c := claimEffects(t, s, 1)
	e := result(t, s, c[0], ledger.EffectOutcome{State: ledger.Unknown, ErrorCode: "target_timeout", Park: true})
	if !e.Parked() {
		t.Fatalf("not parked: %+v", e)
	}
	if more := claimEffects(t, s, 10); len(more) != 0 {
		t.Fatalf("claimed a parked effect, or one behind it: %s", more[0].Effect.Key)
	}
	_, err := s.ResolveEffect(ctx(t), ledger.EffectResolveParams{ID: in[0].ID, Tenant: "globex", To: ledger.Prepared,
		Actor: "alice", Note: "again"})
	wantErr(t, "another tenant's resolution", err, ledger.ErrNotFound)
	e, err = s.ResolveEffect(ctx(t), ledger.EffectResolveParams{ID: in[0].ID, Tenant: "acme", To: ledger.Prepared,
		Actor: "alice", Note: "the CRM was down; send it again"})
	if err != nil || e.State != ledger.Prepared || e.Parked() || e.ResolvedBy != "alice" {
		t.Fatalf("resolved to prepared: %+v %v", e, err)
	}
	c = claimEffects(t, s, 1)
	if len(c) != 1 || c[0].Effect.ID != in[0].ID {
		t.Fatalf("claim after the operator: %+v", c)
	}
	_, err = s.ResolveEffect(ctx(t), ledger.EffectResolveParams{ID: in[0].ID, Tenant: "acme", To: ledger.Succeeded,
		Actor: "alice", Note: "seen in the CRM"})
	wantErr(t, "resolving an executing effect", err, ledger.ErrIllegalTransition)
	result(t, s, c[0], ledger.EffectOutcome{State: ledger.Unknown, ErrorCode: "target_reset"})
	e, err = s.ResolveEffect(ctx(t), ledger.EffectResolveParams{ID: in[0].ID, Tenant: "acme", To: ledger.Succeeded,
		Actor: "alice", Note: "seen in the CRM", ResultRef: "crm-7"})
	if err != nil || e.State != ledger.Succeeded || e.ResultRef != "crm-7" || e.Note != "seen in the CRM" {
		t.Fatalf("resolved to succeeded: %+v %v", e, err)
	}
	if c := claimEffects(t, s, 10); len(c) != 1 || c[0].Effect.ID != in[1].ID {
		t.Fatalf("the next effect after the resolution: %+v", c)
	}
}

// testEffectsTargets: a relay claims only the targets it knows.
func testEffectsTargets(t *testing.T, b Backend) {
	s := b.Fresh(t)
	enqueue(t, s, effectsOf(1, "billing"))
	if c := claimEffects(t, s, 10); len(c) != 0 {
		t.Fatalf("claimed another target's effect: %+v", c[0].Effect)
	}
}

// testEffectsPurge: a final effect past its retention is purged; one that
// is not final never is.
func testEffectsPurge(t *testing.T, b Backend) {
	s := b.Fresh(t)
	in := effectsOf(2, "crm")
	for i := range in {
		in[i].Retention = time.Millisecond
	}
	enqueue(t, s, in)
	result(t, s, claimEffects(t, s, 1)[0], ledger.EffectOutcome{State: ledger.Succeeded, Status: 200})
	time.Sleep(5 * time.Millisecond)
	purge := func(want int) {
		t.Helper()
		if _, err := s.Purge(ctx(t), 100); err != nil {
			t.Fatal(err)
		}
		if left, err := s.Effects(ctx(t), clientKey("acme", in[0].OperationKey)); err != nil || len(left) != want {
			t.Fatalf("after purge: %d effects (%v), want %d", len(left), err, want)
		}
	}
	// Kept while an effect of its operation waits: were the operation's
	// effects enqueued again (a business transaction repeated), it would
	// otherwise come back behind the one that waits, and go out again.
	purge(2)
	result(t, s, claimEffects(t, s, 1)[0], ledger.EffectOutcome{State: ledger.Succeeded, Status: 200})
	time.Sleep(5 * time.Millisecond)
	purge(0)
	// A failure past its retention holds the effects behind it still: it
	// is not purged while they wait.
	held := effectsOf(2, "crm")
	held[0].Retention = time.Millisecond
	enqueue(t, s, held)
	result(t, s, claimEffects(t, s, 1)[0], ledger.EffectOutcome{State: ledger.Failed, Status: 422, ErrorCode: "http_422"})
	time.Sleep(5 * time.Millisecond)
	if _, err := s.Purge(ctx(t), 100); err != nil {
		t.Fatal(err)
	}
	if c := claimEffects(t, s, 10); len(c) != 0 {
		t.Fatalf("the effect behind a purged failure was released: %s", c[0].Effect.Key)
	}
	if es, err := s.Effects(ctx(t), clientKey("acme", held[0].OperationKey)); err != nil || len(es) != 2 {
		t.Fatalf("a failure holding an effect back was purged: %v %v", es, err)
	}
}

// testEffectsLateResult: a claim whose lease lapsed is void by the store's
// clock, swept or not: its result is refused; and once a lapse or an
// operator ended it, a stale relay's result is never taken for its own.
func testEffectsLateResult(t *testing.T, b Backend) {
	s := b.Fresh(t)
	in := enqueue(t, s, effectsOf(1, "crm"))
	lapsing := ledger.EffectClaimParams{Targets: []string{"crm"}, Limit: 1, Lease: Lapsing}
	first, err := s.ClaimEffects(ctx(t), lapsing)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v %v", first, err)
	}
	time.Sleep(5 * time.Millisecond)
	_, err = s.EffectResult(ctx(t), first[0].Lease, ledger.EffectOutcome{State: ledger.Succeeded, Status: 200})
	wantErr(t, "a result past its lease, unswept", err, ledger.ErrStaleOwner)
	// Another relay's claim (of another target) sweeps the lapse; then an
	// operator makes the effect due again.
	if _, err := s.ClaimEffects(ctx(t), ledger.EffectClaimParams{Targets: []string{"billing"}, Limit: 1, Lease: Long}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveEffect(ctx(t), ledger.EffectResolveParams{ID: in[0].ID, Tenant: "acme", To: ledger.Prepared,
		Actor: "alice", Note: "again"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.EffectResult(ctx(t), first[0].Lease, ledger.EffectOutcome{State: ledger.Prepared, ErrorCode: "target_unreachable"})
	if err == nil {
		t.Fatal("a stale relay's result, matching the operator's, was taken for its own")
	}
}

// testEffectsFailedResumes: a definite failure holds the effects behind
// it; an operator who mended its cause makes it prepared, and the
// operation resumes at it: test 11, "one effect succeeds and the next
// fails".
func testEffectsFailedResumes(t *testing.T, b Backend) {
	s := b.Fresh(t)
	in := enqueue(t, s, effectsOf(3, "crm"))
	result(t, s, claimEffects(t, s, 1)[0], ledger.EffectOutcome{State: ledger.Succeeded, Status: 201})
	result(t, s, claimEffects(t, s, 1)[0], ledger.EffectOutcome{State: ledger.Failed, Status: 422, ErrorCode: "http_422"})
	_, err := s.ResolveEffect(ctx(t), ledger.EffectResolveParams{ID: in[1].ID, Tenant: "acme", To: ledger.Succeeded,
		Actor: "alice", Note: "no"})
	wantErr(t, "a failed effect resolved succeeded", err, ledger.ErrIllegalTransition)
	e, err := s.ResolveEffect(ctx(t), ledger.EffectResolveParams{ID: in[1].ID, Tenant: "acme", To: ledger.Prepared,
		Actor: "alice", Note: "the address is fixed at the CRM"})
	if err != nil || e.State != ledger.Prepared || e.NextAt.IsZero() {
		t.Fatalf("a failed effect made prepared: %+v %v", e, err)
	}
	for i := 1; i < 3; i++ {
		c := claimEffects(t, s, 10)
		if len(c) != 1 || c[0].Effect.ID != in[i].ID {
			t.Fatalf("resume, step %d: %+v", i+1, c)
		}
		result(t, s, c[0], ledger.EffectOutcome{State: ledger.Succeeded, Status: 201})
	}
	es, err := s.Effects(ctx(t), clientKey("acme", in[0].OperationKey))
	if err != nil || es[0].Attempts != 1 || es[1].Attempts != 2 || es[2].Attempts != 1 {
		t.Fatalf("attempts after the resume: %+v %v", es, err)
	}
}

// testEffectsEnqueuedAtOnce: two business transactions enqueue effects of
// one operation at once; the one enqueued first commits last. The later
// effect never goes out before the earlier one exists: the second
// transaction waits for the first (SQLite: one writer; PostgreSQL: the
// operation's lock), so order is commit order.
func testEffectsEnqueuedAtOnce(t *testing.T, b Backend) {
	needTx(t, b)
	s := b.Fresh(t)
	in := effectsOf(2, "crm")
	t1 := b.Begin(t, s)
	defer func() { _ = t1.Rollback() }() // after a failure: ends its locks (no-op once committed)
	enqueue(t, t1.Steps, in[:1])
	done := make(chan error, 1)
	go func() {
		t2 := b.Begin(t, s)
		if _, err := t2.Steps.Enqueue(ctx(t), in[1:]); err != nil {
			_ = t2.Rollback()
			done <- err
			return
		}
		done <- t2.Commit()
	}()
	select {
	case err := <-done:
		t.Fatalf("the second transaction did not wait for the first (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if es, err := s.Effects(ctx(t), clientKey("acme", in[0].OperationKey)); err != nil || len(es) != 0 {
		t.Fatalf("effects seen before either transaction committed: %v %v", es, err)
	}
	if err := t1.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c := claimEffects(t, s, 10)
	if len(c) != 1 || c[0].Effect.Name != "step-1" {
		t.Fatalf("first claim after both commits: %+v", c)
	}
}

// testRaceEffectClaims: relays on two store handles claim and deliver at
// once; every effect is claimed exactly once.
func testRaceEffectClaims(t *testing.T, b Backend) {
	s := b.Fresh(t)
	handles := []ledger.Store{s, b.Another(t, s)}
	const ops = 40
	for range ops {
		enqueue(t, s, effectsOf(2, "crm"))
	}
	var mu sync.Mutex
	claims := map[string]int{}
	var wg sync.WaitGroup
	for i := range 6 {
		h := handles[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for idle := 0; idle < 20; {
				cs, err := h.ClaimEffects(ctx(t), ledger.EffectClaimParams{Targets: []string{"crm"}, Limit: 4, Lease: Long})
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if len(cs) == 0 {
					idle++
					time.Sleep(5 * time.Millisecond)
					continue
				}
				idle = 0
				for _, c := range cs {
					mu.Lock()
					claims[c.Effect.ID]++
					mu.Unlock()
					if _, err := h.EffectResult(ctx(t), c.Lease, ledger.EffectOutcome{State: ledger.Succeeded, Status: 200}); err != nil {
						t.Errorf("result: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(claims) != 2*ops {
		t.Fatalf("%d effects claimed, want %d", len(claims), 2*ops)
	}
	for id, n := range claims {
		if n != 1 {
			t.Fatalf("effect %s claimed %d times", id, n)
		}
	}
}
