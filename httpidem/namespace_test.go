package httpidem_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// TestNamespacesAreSeparate: a key means one operation in its namespace.
// The same key on a route of the clients' namespace, on a webhook route
// and on a route of another namespace is three operations, each run once
// and replayed its own answer, from the store and from the replay cache;
// each is of its route's kind.
func TestNamespacesAreSeparate(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		var effects atomic.Int64
		m, err := httpidem.New(httpidem.Options{Store: s,
			Tenant: func(*http.Request) (string, error) { return "acme", nil },
			Routes: []httpidem.Route{{Method: "POST", Pattern: "/v1/tickets"},
				{Method: "POST", Pattern: "/hooks/stripe", Kind: ledger.KindWebhook,
					Namespace: ledger.WebhookNamespace("/hooks/stripe")},
				{Method: "POST", Pattern: "/deliveries", Kind: ledger.KindConsumer,
					Namespace: ledger.ConsumerNamespace("billing")}}})
		if err != nil {
			t.Fatal(err)
		}
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "T-%d", effects.Add(1))
		}))
		send := func(path string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("POST", path, strings.NewReader(`{}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", "k-1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		cases := []struct {
			path string
			want ledger.OpKey
			kind ledger.Kind
		}{
			{"/v1/tickets", ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients, Key: "k-1"}, ledger.KindRoute},
			{"/hooks/stripe", ledger.OpKey{Tenant: "acme", Namespace: "webhook/hooks/stripe", Key: "k-1"}, ledger.KindWebhook},
			{"/deliveries", ledger.OpKey{Tenant: "acme", Namespace: "consumer/billing", Key: "k-1"}, ledger.KindConsumer},
		}
		for round := range 2 {
			for i, c := range cases {
				w := send(c.path)
				replayed := w.Header().Get("Idempotent-Replayed") == "true"
				if w.Code != 201 || w.Body.String() != fmt.Sprint("T-", i+1) || replayed != (round == 1) {
					t.Fatalf("round %d, %s: %d %q replayed %v", round, c.path, w.Code, w.Body, replayed)
				}
			}
		}
		for _, c := range cases {
			op, err := s.GetByKey(t.Context(), c.want)
			if err != nil || op.Kind != c.kind || op.Namespace != c.want.Namespace {
				t.Fatalf("%+v: %+v %v", c.want, op, err)
			}
		}
		if n := effects.Load(); n != int64(len(cases)) {
			t.Fatalf("%d effects, want one per namespace", n)
		}
	})
}

// TestRouteKindsAreChecked: a route's kind is one of ledger.Kinds, and
// its namespace one a store can hold.
func TestRouteKindsAreChecked(t *testing.T) {
	t.Parallel()
	s := dbtest.SQLite(t)
	for _, r := range []httpidem.Route{
		{Method: "POST", Pattern: "/x", Kind: "queue"},
		{Method: "POST", Pattern: "/x", Namespace: "consumer/\xff"},
		{Method: "POST", Pattern: "/x", Namespace: strings.Repeat("n", ledger.MaxNamespaceLen+1)},
	} {
		_, err := httpidem.New(httpidem.Options{Store: s,
			Tenant: func(*http.Request) (string, error) { return "acme", nil }, Routes: []httpidem.Route{r}})
		if err == nil || !strings.Contains(err.Error(), "kind") {
			t.Errorf("kind %q, namespace %q: %v", r.Kind, r.Namespace, err)
		}
	}
}
