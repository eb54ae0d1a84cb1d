package httpidem_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/keyed"
)

// TestActionRoutesAreChecked: an action's route is a POST keyed by its
// Idempotency-Key with a JSON body, under a name fit for a path, a label
// and a fingerprint; anything else is refused when the middleware is made.
func TestActionRoutesAreChecked(t *testing.T) {
	t.Parallel()
	tenant := func(*http.Request) (string, error) { return "acme", nil }
	for want, r := range map[string]httpidem.Route{
		"want a name": {Method: "POST", Pattern: "/a/x", Action: "Mail/Send"},
		"a POST":      {Method: "PUT", Pattern: "/a/x", Action: "mail.send"},
		"keyed by":    {Method: "POST", Pattern: "/a/x", Action: "mail.send", KeyFrom: "header:X-Id"},
		"JSON body":   {Method: "POST", Pattern: "/a/x", Action: "mail.send", Opaque: true},
		"always":      {Method: "POST", Pattern: "/a/x", Action: "mail.send", RequireKey: new(bool)},
	} {
		_, err := httpidem.New(httpidem.Options{Store: struct{ keyed.Store }{}, Tenant: tenant, Routes: []httpidem.Route{r}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", r, err, want)
		}
	}
	_, err := httpidem.New(httpidem.Options{Store: struct{ keyed.Store }{}, Tenant: tenant,
		Routes: []httpidem.Route{{Method: "POST", Pattern: "/a/mail.send", Action: "mail.send"}}})
	if err != nil {
		t.Fatalf("a valid action route: %v", err)
	}
}
