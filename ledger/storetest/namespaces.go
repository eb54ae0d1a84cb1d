package storetest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// runNamespaces runs the tests of key namespaces (docs/design.md, "Words").
func runNamespaces(t *testing.T, b Backend) {
	t.Run("Namespaces", inParallel(b, testNamespaces))
	t.Run("NamespacesReadBack", inParallel(b, testNamespacesReadBack))
	t.Run("NamespacesAudited", inParallel(b, testNamespacesAudited))
	t.Run("NamespacesOfEffects", inParallel(b, testNamespacesOfEffects))
}

// inConsumer is p's key in a consumer's namespace, of kind consumer.
func inConsumer(p ledger.ReserveParams) ledger.ReserveParams {
	p.Namespace, p.Kind = ledger.ConsumerNamespace("billing"), ledger.KindConsumer
	return p
}

// testNamespaces: an operation is unique by (tenant, namespace, key): the
// same key in two namespaces is two operations, each reserved, completed
// and replayed on its own, with its own fingerprint, and found by its
// namespace only.
func testNamespaces(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	clients := Params(Long)
	consumer := inConsumer(clients)
	consumer.Fingerprint = "sha256:another-request" // in one namespace, a mismatch
	ops := map[string]ledger.ReserveParams{"clients": clients, "consumer": consumer}
	leases := map[string]ledger.Lease{}
	for name, p := range ops {
		r := reserve(t, s, p)
		leases[name] = *r.Lease
	}
	if leases["clients"].OpID == leases["consumer"].OpID {
		t.Fatal("one key in two namespaces is one operation")
	}
	for name := range ops {
		if _, err := s.Complete(c, leases[name], ledger.Outcome{State: ledger.Succeeded,
			Response: &ledger.Response{Status: 201, Body: []byte(name)}}); err != nil {
			t.Fatalf("complete %s: %v", name, err)
		}
	}
	for name, p := range ops {
		again, err := s.Reserve(c, p)
		if err != nil || again.Created || again.Op.ID != leases[name].OpID || again.Op.State != ledger.Succeeded ||
			again.Op.Response == nil || string(again.Op.Response.Body) != name {
			t.Fatalf("%s replayed: %+v %v", name, again.Op, err)
		}
		got, err := s.GetByKey(c, p.OpKey())
		if err != nil || got.ID != leases[name].OpID || string(got.Response.Body) != name {
			t.Fatalf("%s by key: %+v %v", name, got, err)
		}
	}
	other := clients.OpKey()
	other.Namespace = ledger.MCPNamespace("tickets")
	if _, err := s.GetByKey(c, other); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the key in a third namespace: %v", err)
	}
	other.Namespace = ""
	_, err := s.GetByKey(c, other)
	wantErr(t, "a key without a namespace", err, ledger.ErrInvalid)
}

// testNamespacesReadBack: an operation's kind and namespace are what it
// was reserved with, on every path that writes one (with a lease, for an
// approval, in a caller's transaction) and every read (the reservation's
// answer, Get, GetByKey, List, a replay, a transition's answer).
func testNamespacesReadBack(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	base := Params(Long)
	leased := inConsumer(base)
	approved := ApprovalParams(Long, Long)
	approved.Key = base.Key
	approved.Namespace, approved.Kind = ledger.WebhookNamespace("/hooks/stripe"), ledger.KindWebhook
	action := base
	action.Kind = ledger.KindAction
	all := []ledger.ReserveParams{action, leased, approved}
	if b.Begin != nil {
		inTx := base
		inTx.Namespace, inTx.Kind = ledger.MCPNamespace("tickets"), ledger.KindMCP
		tx := b.Begin(t, s)
		r, err := tx.Steps.Reserve(c, inTx)
		if err != nil || !r.Created || r.Op.Kind != ledger.KindMCP || r.Op.Namespace != inTx.Namespace {
			t.Fatalf("reserved in a caller's transaction: %+v %v", r.Op, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		all = append(all, inTx)
	}
	byID, leases := map[string]ledger.ReserveParams{}, map[ledger.Kind]ledger.Reservation{}
	for i, p := range all {
		var op *ledger.Operation
		if i < 3 {
			leases[p.Kind] = reserve(t, s, p)
			op = leases[p.Kind].Op
		} else {
			found, err := s.GetByKey(c, p.OpKey())
			if err != nil {
				t.Fatal(err)
			}
			op = found
		}
		byID[op.ID] = p
		same := func(what string, got *ledger.Operation, err error) {
			t.Helper()
			if err != nil || got.ID != op.ID || got.Kind != p.Kind || got.Namespace != p.Namespace || got.Key != p.Key {
				t.Fatalf("%s of %s %s: %+v %v", what, p.Kind, p.Namespace, got, err)
			}
		}
		same("the reservation", op, nil)
		got, err := s.Get(c, op.ID)
		same("Get", got, err)
		got, err = s.GetByKey(c, p.OpKey())
		same("GetByKey", got, err)
		again, err := s.Reserve(c, p)
		same("a replay", again.Op, err)
	}
	page, err := s.List(c, ledger.ListParams{Tenant: "acme"})
	if err != nil || len(page.Operations) != len(all) {
		t.Fatalf("list: %d of %d, %v", len(page.Operations), len(all), err)
	}
	for _, op := range page.Operations {
		if p := byID[op.ID]; op.Kind != p.Kind || op.Namespace != p.Namespace {
			t.Fatalf("listed %s %s, reserved %s %s", op.Kind, op.Namespace, p.Kind, p.Namespace)
		}
	}
	// A transition's answer: a completion, an approval's acquire.
	done, err := s.Complete(c, *leases[ledger.KindConsumer].Lease, ledger.Outcome{State: ledger.Succeeded,
		Response: &ledger.Response{Status: 201}})
	if err != nil || done.Kind != ledger.KindConsumer || done.Namespace != leased.Namespace {
		t.Fatalf("completed: %+v %v", done, err)
	}
	if _, err := s.Approve(c, decision(leases[ledger.KindWebhook].Op.Approval.ID)); err != nil {
		t.Fatal(err)
	}
	taken, err := s.Acquire(c, ledger.AcquireParams{ID: leases[ledger.KindWebhook].Op.ID, Lease: Long, Actor: "gw"})
	if err != nil || taken.Op.Kind != ledger.KindWebhook || taken.Op.Namespace != approved.Namespace {
		t.Fatalf("acquired: %+v %v", taken.Op, err)
	}
}

// testNamespacesAudited: the events of an operation in a namespace other
// than the clients' name it; those of the clients' namespace do not (their
// leaves are as before namespaces), whether written with a transition or
// recorded apart.
func testNamespacesAudited(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	clients := reserve(t, s, Params(Long))
	consumer := reserve(t, s, inConsumer(Params(Long)))
	for _, r := range []ledger.Reservation{clients, consumer} {
		if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded,
			Response: &ledger.Response{Status: 201}}); err != nil {
			t.Fatal(err)
		}
	}
	replays := []audit.Event{
		{Tenant: "acme", Kind: audit.Replayed, OperationID: clients.Op.ID, Namespace: ledger.NamespaceClients,
			Key: clients.Op.Key},
		{Tenant: "acme", Kind: audit.Replayed, OperationID: consumer.Op.ID, Namespace: consumer.Op.Namespace,
			Key: consumer.Op.Key},
	}
	for i := range replays {
		replays[i].At = consumer.Op.CreatedAt
	}
	if err := s.RecordEvents(c, replays); err != nil {
		t.Fatal(err)
	}
	for r, want := range map[*ledger.Operation]string{clients.Op: "", consumer.Op: "consumer/billing"} {
		es, err := s.AuditEvents(c, ledger.AuditParams{OperationID: r.ID})
		if err != nil || len(es) != 3 {
			t.Fatalf("events of %s: %+v %v", r.Namespace, es, err)
		}
		for _, e := range es {
			if e.Namespace != want || e.Key != r.Key {
				t.Fatalf("%s event of %s: namespace %q key %q, want %q %q", e.Kind, r.Namespace, e.Namespace, e.Key,
					want, r.Key)
			}
		}
	}
}

// testNamespacesOfEffects: the effects of two operations that share a key
// in two namespaces never meet: their derived keys differ (ledger.EffectKey),
// each is listed with its own operation, and each operation's order holds
// its own effects only.
func testNamespacesOfEffects(t *testing.T, b Backend) {
	s := b.Fresh(t)
	c := ctx(t)
	mine := effectsOf(2, "crm")
	theirs := effectsOf(2, "crm")
	for i := range theirs {
		theirs[i].OperationKey, theirs[i].Namespace = mine[i].OperationKey, ledger.ConsumerNamespace("billing")
		theirs[i].Body = []byte(`{"another":"effect"}`) // under one key, a mismatch
	}
	got := enqueue(t, s, append(append([]ledger.EffectParams{}, mine...), theirs...))
	if got[0].Key == got[2].Key || got[0].Key != mine[0].OperationKey+"/step-1" ||
		got[2].Key != ledger.EffectKey(ledger.ConsumerNamespace("billing"), mine[0].OperationKey, "step-1") ||
		got[0].Namespace != ledger.NamespaceClients || got[2].Namespace != "consumer/billing" ||
		got[0].UpstreamKey() == got[2].UpstreamKey() {
		t.Fatalf("derived keys: %+v", got)
	}
	for _, k := range []ledger.OpKey{clientKey("acme", mine[0].OperationKey),
		{Tenant: "acme", Namespace: "consumer/billing", Key: mine[0].OperationKey}} {
		es, err := s.Effects(c, k)
		if err != nil || len(es) != 2 || es[0].Namespace != k.Namespace || es[1].Namespace != k.Namespace {
			t.Fatalf("effects of %+v: %+v %v", k, es, err)
		}
	}
	// Each operation's first effect is due: neither waits for the other's.
	claims := claimEffects(t, s, 10)
	if len(claims) != 2 || !bytes.Equal(claims[0].Effect.Body, mine[0].Body) ||
		!bytes.Equal(claims[1].Effect.Body, theirs[0].Body) {
		t.Fatalf("claimed %d: %+v", len(claims), claims)
	}
}
