package httpidem_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/httpidem"
)

// TestMCPRoutesAreChecked: a tool call's route is a POST keyed by its
// Idempotency-Key with JSON arguments, naming its server and its tool;
// anything else is refused when the middleware is made.
func TestMCPRoutesAreChecked(t *testing.T) {
	t.Parallel()
	tenant := func(*http.Request) (string, error) { return "acme", nil }
	for _, r := range []httpidem.Route{
		{Method: "POST", Pattern: "/t/0", MCPServer: "tickets"},
		{Method: "POST", Pattern: "/t/0", MCPTool: "create"},
		{Method: "PUT", Pattern: "/t/0", MCPServer: "tickets", MCPTool: "create"},
		{Method: "POST", Pattern: "/t/0", MCPServer: "tickets", MCPTool: "create", KeyFrom: "header:X-Id"},
		{Method: "POST", Pattern: "/t/0", MCPServer: "tickets", MCPTool: "create", Opaque: true},
		{Method: "POST", Pattern: "/t/0", MCPServer: "tickets", MCPTool: "create", RequireKey: new(bool)},
		{Method: "POST", Pattern: "/t/0", MCPServer: "tickets", MCPTool: "create", Action: "mail.send"},
	} {
		_, err := httpidem.New(httpidem.Options{Store: struct{ httpidem.Store }{}, Tenant: tenant, Routes: []httpidem.Route{r}})
		if err == nil || !strings.Contains(err.Error(), "naming its server and tool") && !strings.Contains(err.Error(), "action") {
			t.Errorf("%+v: %v", r, err)
		}
	}
	_, err := httpidem.New(httpidem.Options{Store: struct{ httpidem.Store }{}, Tenant: tenant,
		Routes: []httpidem.Route{{Method: "POST", Pattern: "/t/0", MCPServer: "tickets", MCPTool: "create"}}})
	if err != nil {
		t.Fatalf("a valid tool route: %v", err)
	}
}
