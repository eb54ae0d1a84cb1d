package ledger_test

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// TestNamespaces pins the namespaces' names (docs/design.md, "Words"):
// stored in every operation, they are a format, not a detail.
func TestNamespaces(t *testing.T) {
	for _, c := range [][2]string{
		{ledger.NamespaceClients, "clients"},
		{audit.ClientsNamespace, ledger.NamespaceClients},
		{ledger.WebhookNamespace("/hooks/stripe"), "webhook/hooks/stripe"},
		{ledger.ConsumerNamespace("billing-events"), "consumer/billing-events"},
		{ledger.MCPNamespace("tickets"), "mcp/tickets"},
		{ledger.MCPMetaNamespace("tickets"), "mcp-meta/tickets"},
		{string(ledger.KindRoute) + " " + string(ledger.KindAction) + " " + string(ledger.KindMCP) + " " +
			string(ledger.KindConsumer) + " " + string(ledger.KindWebhook), "route action mcp consumer webhook"},
	} {
		if c[0] != c[1] {
			t.Errorf("%q, want %q", c[0], c[1])
		}
	}
	for _, k := range ledger.Kinds {
		if !k.Valid() {
			t.Errorf("%q is not valid", k)
		}
	}
	for _, k := range []ledger.Kind{"", "Route", "queue", "route "} {
		if k.Valid() {
			t.Errorf("%q is valid", k)
		}
	}
}

// TestUpstreamKey: the clients' keys go upstream as they always did; any
// other namespace's never as a clients' key, and never as another
// namespace's.
func TestUpstreamKey(t *testing.T) {
	long := strings.Repeat("k", 255)
	for _, c := range []struct{ tenant, ns, key, want string }{
		{"acme", ledger.NamespaceClients, "task-42", "acme:task-42"},
		{"acme", ledger.NamespaceClients, "a:b~c", "acme:a:b~c"},
		{"acme", "consumer/billing", "evt-1", "acme~consumer/billing~evt-1"},
		{"acme", "mcp/tickets", "create/bot/x%2Fy", "acme~mcp/tickets~create/bot/x%252Fy"},
		{"acme", "webhook/hooks/{id}", "a:b~c", "acme~webhook/hooks/{id}~a%3Ab%7Ec"},
		{"ac~me", "consumer/b", "k", "ac%7Eme~consumer/b~k"},
	} {
		if got := ledger.UpstreamKey(c.tenant, c.ns, c.key); got != c.want {
			t.Errorf("UpstreamKey(%q, %q, %q) = %q, want %q", c.tenant, c.ns, c.key, got, c.want)
		}
	}
	a := ledger.UpstreamKey("acme", ledger.NamespaceClients, long)
	b := ledger.UpstreamKey("acme", "consumer/billing", long)
	if !strings.HasPrefix(a, "sha256:") || !strings.HasPrefix(b, "sha256:") || a == b || len(a) != 71 {
		t.Fatalf("long keys: %q %q", a, b)
	}
}

// FuzzUpstreamKey: two different (tenant, namespace, key) never give one
// upstream key, and a namespace other than the clients' never gives a
// form with ':' but a digest.
func FuzzUpstreamKey(f *testing.F) {
	f.Add("acme", "clients", "x~y", "acme", "consumer/x", "y")
	f.Add("a:b", "clients", "c", "a", "clients", "b:c")
	f.Add("a", "consumer/b~c", "d", "a", "consumer/b", "c~d")
	f.Add("a", "mcp/t", "k%7E", "a", "mcp/t", "k~")
	f.Fuzz(func(t *testing.T, t1, ns1, k1, t2, ns2, k2 string) {
		u1, u2 := ledger.UpstreamKey(t1, ns1, k1), ledger.UpstreamKey(t2, ns2, k2)
		// The clients' form is tenant:key, as before namespaces: a
		// tenant with ':' is ambiguous there, and tenants never have one.
		clientsOnly := ns1 == ledger.NamespaceClients && ns2 == ledger.NamespaceClients
		if clientsOnly && (strings.Contains(t1, ":") || strings.Contains(t2, ":")) {
			return
		}
		if same := t1 == t2 && ns1 == ns2 && k1 == k2; (u1 == u2) != same {
			t.Fatalf("(%q, %q, %q) and (%q, %q, %q) both give %q", t1, ns1, k1, t2, ns2, k2, u1)
		}
		if ns1 != ledger.NamespaceClients && strings.Contains(u1, ":") && !strings.HasPrefix(u1, "sha256:") {
			t.Fatalf("(%q, %q, %q) gives %q, a clients' form", t1, ns1, k1, u1)
		}
	})
}

// TestEffectKey: an effect of the clients' namespace keeps its derived
// key; one of any other namespace has a key no clients' effect can have.
func TestEffectKey(t *testing.T) {
	for _, c := range []struct{ ns, op, name, want string }{
		{"", "dossier_42:v5", "make-pdf", "dossier_42:v5/make-pdf"},
		{ledger.NamespaceClients, "a/b", "c", "a/b/c"},
		{"consumer/billing", "evt-1", "notify", "consumer%2Fbilling~evt-1~notify"},
		{"consumer/billing", "a~b/c%", "n", "consumer%2Fbilling~a%7Eb%2Fc%25~n"},
	} {
		if got := ledger.EffectKey(c.ns, c.op, c.name); got != c.want {
			t.Errorf("EffectKey(%q, %q, %q) = %q, want %q", c.ns, c.op, c.name, got, c.want)
		}
	}
	if ledger.EffectKey("consumer/a~b", "c", "d") == ledger.EffectKey("consumer/a", "b~c", "d") {
		t.Fatal("two operations' effects share a key")
	}
	p := ledger.EffectParams{Tenant: "acme", OperationKey: "k", Name: "n", Target: "crm", Path: "/x"}.WithDefaults()
	if p.Namespace != ledger.NamespaceClients || p.Key() != "k/n" || p.Validate() != nil {
		t.Fatalf("an effect without a namespace: %+v", p)
	}
}
