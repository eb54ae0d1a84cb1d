package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Previous is an operation as the release before key namespaces wrote it
// (its route, principal and key told what it was), and what the upgrade
// to namespaces must make of it (docs/design.md, "Words"). A store's
// upgrade test writes each with that release's schema and statements,
// migrates, and calls CheckUpgraded.
type Previous struct {
	ID, Key, Route, Principal, Fingerprint string
	// State is executing (under a lease of an hour), or final with
	// Response, stored as that release stored it.
	State    ledger.State
	Response *ledger.Response
	// Kind, Namespace and NewKey are what the upgrade makes of it.
	Kind              ledger.Kind
	Namespace, NewKey string
	// Lost, when set, is the key the MCP proxy derives now for the
	// operation's intent: it names nothing (the upgrade could not move
	// the operation under it), and the operation is forgotten at its
	// retention.
	Lost string
}

// PreviousTenant is the tenant of PreviousRelease's operations.
const PreviousTenant = "acme"

// PreviousRelease lists operations of every kind, as the previous release
// wrote them, with what the upgrade makes of each.
func PreviousRelease() []Previous {
	json := map[string][]string{"Content-Type": {"application/json"}}
	final := func(status int, h map[string][]string, body string) *ledger.Response {
		return &ledger.Response{Status: status, Header: h, Body: []byte(body)}
	}
	const tool, server = "create_ticket", "tickets"
	mcpRoute := contract.MCPRoute(server, tool)
	derived := func(principal, intent string) string {
		return "mcp/" + server + "/" + tool + "/" + principal + "/" + intent
	}
	longPrincipal, longIntent := "p"+strings.Repeat("/", 60), strings.Repeat("/", 40)
	hashed := sha256.Sum256([]byte(derived("agent", strings.Repeat("i", 128)) + strings.Repeat("x", 200)))
	ops := []Previous{
		{Key: "k-route", Route: "POST /v1/tickets", Principal: "agent", State: ledger.Succeeded,
			Response: final(201, map[string][]string{"Content-Type": {"application/json"}, "Location": {"/v1/tickets/T-1"},
				"Set-Cookie": {"a=1", "b=2"}}, `{"id":"T-1"}`),
			Kind: ledger.KindRoute, Namespace: ledger.NamespaceClients, NewKey: "k-route"},
		{Key: "k-action", Route: contract.ActionRoute("mail.send"), Principal: "agent", State: ledger.Failed,
			Response: final(422, json, `{"error":"bounced"}`),
			Kind:     ledger.KindAction, Namespace: ledger.NamespaceClients, NewKey: "k-action"},
		{Key: "msg-1", Route: "consumer:billing-events", Principal: "consumer:billing-events", State: ledger.Succeeded,
			Response: final(200, nil, "ok"),
			Kind:     ledger.KindConsumer, Namespace: ledger.ConsumerNamespace("billing-events"), NewKey: "msg-1"},
		{Key: derived("agent", "ticket for order 42"), Route: mcpRoute, Principal: "agent", State: ledger.Succeeded,
			Response: final(200, json, `{"result":{"content":[{"type":"text","text":"T-42"}]}}`),
			Kind:     ledger.KindMCP, Namespace: ledger.MCPNamespace(server),
			NewKey: contract.MCPIntentKey(tool, "agent", "ticket for order 42")},
		{Key: derived("spiffe://ia/billing", "x/job-c1%"), Route: mcpRoute, Principal: "spiffe://ia/billing",
			State: ledger.Succeeded, Response: final(200, json, `{"result":{}}`),
			Kind: ledger.KindMCP, Namespace: ledger.MCPNamespace(server),
			NewKey: contract.MCPIntentKey(tool, "spiffe://ia/billing", "x/job-c1%")},
		{Key: "client-key-1", Route: mcpRoute, Principal: "agent", State: ledger.Succeeded,
			Response: final(200, json, `{"result":{"meta":true}}`),
			Kind:     ledger.KindMCP, Namespace: ledger.MCPMetaNamespace(server), NewKey: "client-key-1"},
		// A client's key shaped as another principal's derived key is its own.
		{Key: derived("bob", "x"), Route: mcpRoute, Principal: "agent", State: ledger.Succeeded,
			Response: final(200, json, `{"result":{"shaped":true}}`),
			Kind:     ledger.KindMCP, Namespace: ledger.MCPMetaNamespace(server), NewKey: derived("bob", "x")},
		{Key: "mcp/sha256/" + hex.EncodeToString(hashed[:]), Route: mcpRoute, Principal: "agent", State: ledger.Executing,
			Kind: ledger.KindMCP, Namespace: ledger.MCPNamespace(server), NewKey: "mcp/sha256/" + hex.EncodeToString(hashed[:])},
		{Key: derived(longPrincipal, longIntent), Route: mcpRoute, Principal: longPrincipal, State: ledger.Succeeded,
			Response: final(200, json, `{"result":{"long":true}}`),
			Kind:     ledger.KindMCP, Namespace: ledger.MCPNamespace(server), NewKey: derived(longPrincipal, longIntent),
			Lost: contract.MCPIntentKey(tool, longPrincipal, longIntent)},
		{Key: "evt_1", Route: "POST /hooks/stripe", Principal: "webhook:/hooks/stripe", State: ledger.Succeeded,
			Response: final(200, nil, ""),
			Kind:     ledger.KindWebhook, Namespace: ledger.WebhookNamespace("/hooks/stripe"), NewKey: "evt_1"},
	}
	for i := range ops {
		ops[i].ID = ledger.NewID()
		ops[i].Fingerprint = "sha256:" + strings.Repeat(string(rune('a'+i)), 64)
	}
	return ops
}

// Upgrade is what a store's upgrade test supplies to Upgraded: its
// migration to the previous release's schema, how that release wrote an
// operation, and its migration to this release's.
type Upgrade struct {
	Previous func() error
	Write    func(Previous) error
	Migrate  func() error
}

// Upgraded populates s as the previous release did (PreviousRelease),
// upgrades it, and checks what the upgrade made of it (CheckUpgraded).
func Upgraded(t *testing.T, s ledger.Store, u Upgrade) {
	t.Helper()
	if err := u.Previous(); err != nil {
		t.Fatalf("the previous release's schema: %v", err)
	}
	ops := PreviousRelease()
	for _, op := range ops {
		if err := u.Write(op); err != nil {
			t.Fatalf("%s, as the previous release wrote it: %v", op.Key, err)
		}
	}
	if err := u.Migrate(); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	CheckUpgraded(t, s, ops)
}

// CheckUpgraded checks what an upgrade made of ops: each operation in its
// namespace, of its kind, under its new key, with its state, route and
// principal; found by its new identity, its stored answer byte for byte,
// and replayed to a retry; its old events as they were (no namespace,
// their leaves unchanged); a key the proxy derives now that the upgrade
// could not give names nothing. A new operation then takes its namespace
// into its events.
func CheckUpgraded(t *testing.T, s ledger.Store, ops []Previous) {
	t.Helper()
	c := ctx(t)
	for _, want := range ops {
		k := ledger.OpKey{Tenant: PreviousTenant, Namespace: want.Namespace, Key: want.NewKey}
		op, err := s.GetByKey(c, k)
		if err != nil || op.ID != want.ID || op.Kind != want.Kind || op.State != want.State || op.Route != want.Route ||
			op.Principal != want.Principal || op.Fingerprint != want.Fingerprint {
			t.Fatalf("%s, upgraded: %+v %v; want %s %s %q", want.Key, op, err, want.Kind, want.Namespace, want.NewKey)
		}
		sameResponse(t, want, op)
		if want.State.Final() {
			p := ledger.ReserveParams{Tenant: PreviousTenant, Namespace: want.Namespace, Key: want.NewKey,
				Kind: want.Kind, Route: want.Route, Fingerprint: want.Fingerprint, Lease: Long, Retention: Retention,
				Actor: "upgraded-gateway"}
			r, err := s.Reserve(c, p)
			if err != nil || r.Created || r.Op.ID != want.ID {
				t.Fatalf("%s, retried after the upgrade: %+v %v", want.Key, r, err)
			}
			sameResponse(t, want, r.Op)
		}
		if want.Lost != "" {
			k.Key = want.Lost
			if _, err := s.GetByKey(c, k); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("%s: its key of now finds %v", want.Key, err)
			}
		}
		es, err := s.AuditEvents(c, ledger.AuditParams{OperationID: want.ID})
		if err != nil || len(es) == 0 {
			t.Fatalf("%s: events %v %v", want.Key, es, err)
		}
		for _, e := range es {
			if e.Namespace != "" || e.Key != want.Key {
				t.Fatalf("%s: an event of before the upgrade reads %+v", want.Key, e)
			}
		}
	}
	p := Params(Long)
	p.Tenant, p.Namespace, p.Kind = PreviousTenant, ledger.ConsumerNamespace("billing-events"), ledger.KindConsumer
	r := reserve(t, s, p)
	es, err := s.AuditEvents(c, ledger.AuditParams{OperationID: r.Op.ID})
	if err != nil || len(es) != 1 || es[0].Namespace != p.Namespace {
		t.Fatalf("a new consumer's operation's events: %+v %v", es, err)
	}
}

// sameResponse fails unless op holds want's response byte for byte.
func sameResponse(t *testing.T, want Previous, op *ledger.Operation) {
	t.Helper()
	if want.Response == nil {
		if op.Response != nil {
			t.Fatalf("%s: a response %+v", want.Key, op.Response)
		}
		return
	}
	got := op.Response
	if got == nil || got.Status != want.Response.Status || !bytes.Equal(got.Body, want.Response.Body) ||
		(len(got.Header) != 0 || len(want.Response.Header) != 0) && !reflect.DeepEqual(got.Header, want.Response.Header) ||
		op.ResponseSHA256 != want.Response.SHA256() {
		t.Fatalf("%s: response %+v (sha %s), want %+v", want.Key, got, op.ResponseSHA256, want.Response)
	}
}
