package surfacetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/ledger"
)

// StormCopies is how many copies of one command the storm sends at once.
const StormCopies = 50

// testStorm: 50 copies of one command at once make one effect; every
// copy is answered with the result, its replay, or "in progress".
func testStorm(t *testing.T, s Surface, c Call) {
	var answers []Answer
	if cp, ok := s.(Copier); ok {
		answers = cp.SendCopies(t, c, StormCopies)
	} else {
		answers = make([]Answer, StormCopies)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() { answers[i] = s.Send(t, c) })
		}
		wg.Wait()
	}
	executed := 0
	for _, a := range answers {
		switch a.Outcome {
		case Executed:
			executed++
		case Replayed, InProgress:
		default:
			t.Fatalf("a copy answered %s: %s", a.Outcome, a.Body)
		}
	}
	if n := s.Effects(t, c.Marker); n != 1 || executed > 1 {
		t.Fatalf("%d effects, %d copies executed, of %d copies", n, executed, StormCopies)
	}
}

// testReplay: a retry gets the recorded answer, byte for byte, marked as
// a replay, and nothing is sent again.
func testReplay(t *testing.T, s Surface, c Call) {
	first := s.Send(t, c)
	again := s.Send(t, c)
	if first.Outcome != Executed || again.Outcome != Replayed || !bytes.Equal(first.Body, again.Body) {
		t.Fatalf("first %s %q, retry %s %q", first.Outcome, first.Body, again.Outcome, again.Body)
	}
	if first.OpID != "" && again.OpID != "" && first.OpID != again.OpID {
		t.Fatalf("the retry named operation %s, the first %s", again.OpID, first.OpID)
	}
	if n := s.Effects(t, c.Marker); n != 1 {
		t.Fatalf("%d effects", n)
	}
}

// testChanged: another command under a used key is refused, nothing of
// it is sent, and the first still replays.
func testChanged(t *testing.T, s Surface, c Call) {
	first := s.Send(t, c)
	changed := c
	changed.Variant = "b"
	refused := s.Send(t, changed)
	if first.Outcome != Executed || refused.Outcome != Refused {
		t.Fatalf("first %s, changed %s %q", first.Outcome, refused.Outcome, refused.Body)
	}
	if p := refused.Parked; p != nil && p["Idemgate-Parked-Reason"] != "conflict" {
		t.Fatalf("a conflicting message parked with %v", p)
	}
	if again := s.Send(t, c); again.Outcome != Replayed {
		t.Fatalf("the first command after the refusal: %s", again.Outcome)
	}
	if n := s.Effects(t, c.Marker); n != 1 {
		t.Fatalf("%d effects", n)
	}
}

// testUnknown: a command sent whose answer never came is unknown, and a
// retry is told so, never sent again.
func testUnknown(t *testing.T, s Surface, c Call) {
	c.Upstream = LosesAnswer
	first := s.Send(t, c)
	if first.Outcome != Unknown {
		t.Fatalf("a lost answer: %s %q", first.Outcome, first.Body)
	}
	if retry := s.Send(t, c); retry.Outcome != Unknown {
		t.Fatalf("the retry: %s %q", retry.Outcome, retry.Body)
	}
	if n := s.Effects(t, c.Marker); n != 1 {
		t.Fatalf("%d effects, want 1: the unknown command was sent again", n)
	}
	op := operation(t, s, c)
	if op.State != ledger.Unknown {
		t.Fatalf("operation %s", op.State)
	}
	// A consumer's message is parked, saying why and which operation, so
	// that an operator who resolves it "not applied" can deliver it again.
	if p := first.Parked; p != nil && (p["Idemgate-Parked-Reason"] != "unknown" || p["Idemgate-Operation"] != op.ID) {
		t.Fatalf("parked with %v, operation %s", p, op.ID)
	}
}

// testReleased: a command that could not be sent (the upstream refuses
// connections) is released, and its retry, once the upstream is back,
// runs once.
func testReleased(t *testing.T, s Surface, c Call) {
	b, ok := s.(Breaker)
	if !ok {
		t.Fatalf("%s breaks no upstream and skips nothing for it", s.Name())
	}
	c.Upstream = Breakable
	b.Down(t)
	down := s.Send(t, c)
	b.Up(t)
	if down.Outcome != Released || s.Effects(t, c.Marker) != 0 {
		t.Fatalf("sent to a refusing upstream: %s %q, %d effects", down.Outcome, down.Body, s.Effects(t, c.Marker))
	}
	_, redelivers := s.(Redeliverer)
	// (A broker may be delivering it again already: executing.)
	if op := operation(t, s, c); op.State != ledger.Prepared && !(redelivers && op.State == ledger.Executing) {
		t.Fatalf("after the refusal: %s", op.State)
	}
	// A surface may learn only from its first retry that the upstream
	// came back anew (an MCP server restarted answers 404 to the proxy's
	// old session, which ran nothing): released again, never unknown.
	retry := s.Send(t, c)
	for i := 0; retry.Outcome == Released && i < 3; i++ {
		retry = s.Send(t, c)
	}
	if redelivers && retry.Outcome == Replayed {
		retry.Outcome = Executed // the broker's own redelivery ran it first
	}
	again := s.Send(t, c)
	if retry.Outcome != Executed || again.Outcome != Replayed || s.Effects(t, c.Marker) != 1 {
		t.Fatalf("once back: %s then %s, %d effects", retry.Outcome, again.Outcome, s.Effects(t, c.Marker))
	}
}

// testAudit: each transition of an operation is one history entry and one
// audit event of its tenant, and a replay adds none.
func testAudit(t *testing.T, s Surface, c Call) {
	s.Send(t, c)
	s.Send(t, c)
	op := operation(t, s, c)
	ctx := context.Background()
	h, err := s.Store().History(ctx, op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].To != ledger.Executing || h[1].To != ledger.Succeeded {
		t.Fatalf("history %+v", h)
	}
	events, err := s.Store().AuditEvents(ctx, ledger.AuditParams{Tenant: c.Tenant, OperationID: op.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != len(h) {
		t.Fatalf("%d audit events for %d transitions: %+v", len(events), len(h), events)
	}
	for _, e := range events {
		if e.Tenant != c.Tenant || e.OperationID != op.ID {
			t.Fatalf("event %+v", e)
		}
	}
}

// testTenants: one key in two tenants is two operations, two effects,
// each replayed to its own tenant.
func testTenants(t *testing.T, s Surface, c Call) {
	b := c
	b.Tenant = TenantB
	a1, b1 := s.Send(t, c), s.Send(t, b)
	a2, b2 := s.Send(t, c), s.Send(t, b)
	if a1.Outcome != Executed || b1.Outcome != Executed || a2.Outcome != Replayed || b2.Outcome != Replayed {
		t.Fatalf("acme %s then %s, globex %s then %s", a1.Outcome, a2.Outcome, b1.Outcome, b2.Outcome)
	}
	if !bytes.Equal(a1.Body, a2.Body) || !bytes.Equal(b1.Body, b2.Body) {
		t.Fatalf("a tenant was replayed another's answer: %q %q / %q %q", a1.Body, a2.Body, b1.Body, b2.Body)
	}
	opA, opB := operation(t, s, c), operation(t, s, b)
	if opA.ID == opB.ID || opA.Tenant != TenantA || opB.Tenant != TenantB || s.Effects(t, c.Marker) != 2 {
		t.Fatalf("operations %s (%s) and %s (%s), %d effects", opA.ID, opA.Tenant, opB.ID, opB.Tenant, s.Effects(t, c.Marker))
	}
	if _, err := s.Store().GetByKey(context.Background(), ledger.OpKey{Tenant: "nobody", Namespace: opA.Namespace,
		Key: opA.Key}); err == nil {
		t.Fatal("a third tenant found the key")
	}
}

// testNamespaces (issue 30, case 1): one key used on every surface of one
// tenant at once — an agent's Idempotency-Key equal to a webhook's event
// id and to a consumer's message id, one id fanned out to a NATS and an
// AMQP consumer — is one operation per surface, each executed.
func testNamespaces(t *testing.T, surfaces []Surface) {
	key, marker := "evt_shared-"+runID, "m-shared-"+runID
	ids, shared := map[string]string{}, map[string]bool{}
	for _, s := range surfaces {
		c := Call{Tenant: TenantA, Key: key, Marker: marker + "-" + s.Name(), Variant: s.Name()}
		a := s.Send(t, c)
		if a.Outcome != Executed && !shared[s.Key(c).Namespace] {
			t.Fatalf("%s, after the others: %s %q %v", s.Name(), a.Outcome, a.Body, a.Parked)
		}
		if shared[s.Key(c).Namespace] {
			// Routes and actions share the clients' namespace by design
			// (docs/design.md): there the key's reuse is refused.
			if a.Outcome != Refused {
				t.Fatalf("%s, in a namespace already used: %s", s.Name(), a.Outcome)
			}
			continue
		}
		shared[s.Key(c).Namespace] = true
		op := operation(t, s, c)
		if other, dup := ids[op.ID]; dup {
			t.Fatalf("%s and %s share operation %s", s.Name(), other, op.ID)
		}
		ids[op.ID] = s.Name()
		if n := s.Effects(t, marker+"-"+s.Name()); n != 1 {
			t.Fatalf("%s: %d effects", s.Name(), n)
		}
	}
}

// operation reads the operation c made on s.
func operation(t testing.TB, s Surface, c Call) *ledger.Operation {
	t.Helper()
	op, err := s.Store().GetByKey(context.Background(), s.Key(c))
	if err != nil {
		t.Fatalf("operation of %s's key %s: %v", c.Tenant, c.Key, err)
	}
	return op
}

// testApproval: a call the policy holds waits for a person, with nothing
// sent; its requester may not decide it, an approval of another
// fingerprint is refused, the approver's runs it once, and a changed
// command under the key is still refused.
func testApproval(t *testing.T, s Surface, c Call) {
	d, ok := s.(Decider)
	if !ok {
		t.Fatalf("%s decides no approval and skips nothing for it", s.Name())
	}
	c.Upstream = NeedsApproval
	if a := s.Send(t, c); a.Outcome != Pending || s.Effects(t, c.Marker) != 0 {
		t.Fatalf("a held call: %s %q, %d effects", a.Outcome, a.Body, s.Effects(t, c.Marker))
	}
	op := operation(t, s, c)
	if op.Approval == nil {
		t.Fatalf("no approval on %+v", op)
	}
	apr, err := s.Store().GetApproval(context.Background(), op.Approval.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Decide(t, c.Tenant, apr.ID, apr.Fingerprint, true); st != 403 {
		t.Fatalf("the requester deciding: %d", st)
	}
	if st := d.Decide(t, c.Tenant, apr.ID, "sha256:"+strings.Repeat("0", 64), false); st < 400 {
		t.Fatalf("an approval of another fingerprint: %d", st)
	}
	if again := s.Send(t, c); again.Outcome != Pending || s.Effects(t, c.Marker) != 0 {
		t.Fatalf("before a valid decision: %s, %d effects", again.Outcome, s.Effects(t, c.Marker))
	}
	if st := d.Decide(t, c.Tenant, apr.ID, apr.Fingerprint, false); st != 200 {
		t.Fatalf("the approver deciding: %d", st)
	}
	run, again := s.Send(t, c), s.Send(t, c)
	changed := c
	changed.Variant = "b"
	refused := s.Send(t, changed)
	if run.Outcome != Executed || again.Outcome != Replayed || refused.Outcome != Refused || s.Effects(t, c.Marker) != 1 {
		t.Fatalf("approved: %s, %s, changed %s, %d effects", run.Outcome, again.Outcome, refused.Outcome, s.Effects(t, c.Marker))
	}
}

// testInputBounded: a command over the surface's bound is refused before
// anything is reserved or sent.
func testInputBounded(t *testing.T, s Surface, c Call) {
	c.Oversize = true
	if a := s.Send(t, c); a.Outcome != TooLarge {
		t.Fatalf("an oversized command: %s %.200q", a.Outcome, a.Body)
	}
	if _, err := s.Store().GetByKey(context.Background(), s.Key(c)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an oversized command was reserved: %v", err)
	}
	if n := s.Effects(t, c.Marker); n != 0 {
		t.Fatalf("%d effects", n)
	}
}
