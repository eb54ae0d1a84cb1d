package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// TestProblemsNamingAnOperationLinkIt: the attempt that lost the answer
// (502, 504, a cut body) and the one that sent nothing name the operation
// and link its status resource, exactly as every retry's 409 does.
func TestProblemsNamingAnOperationLinkIt(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		for _, c := range []struct {
			path, code, state string
			status            int
		}{
			{"/v1/lost", "outcome_unknown", "unknown", 502},
			{"/v1/cut", "outcome_unknown", "unknown", 502},
			{"/v1/slow", "outcome_unknown", "unknown", 504},
			{"/v1/down", "upstream_unavailable", "prepared", 502},
		} {
			key := "link" + c.path
			r := e.do("POST", c.path, "agent-token", `{}`, "Idempotency-Key", key)
			op, err := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
				Key: key})
			if err != nil {
				t.Fatalf("%s: %v", c.path, err)
			}
			var p contract.Problem
			_ = json.Unmarshal([]byte(r.body), &p)
			if r.status != c.status || p.Code != c.code || p.OperationID != op.ID || string(p.State) != c.state ||
				p.StatusURL != "/_idem/v1/operations/"+op.ID {
				t.Errorf("%s: %d %s", c.path, r.status, r.body)
			}
			if status := e.do("GET", p.StatusURL, "agent-token", ""); status.status != 200 {
				t.Errorf("%s: status_url %q answers %d", c.path, p.StatusURL, status.status)
			}
		}
	})
}

// TestUpstreamFailuresAreLogged: every 502 and 504 the proxy answers for
// an upstream leaves an error line saying which upstream failed and why,
// without bodies, credentials or query strings.
func TestUpstreamFailuresAreLogged(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		for _, c := range []struct{ method, path, errorText string }{
			{"POST", "/v1/down", "connection refused"},
			{"POST", "/v1/lost", "EOF"},
			{"POST", "/v1/cut", "reading the answer: unexpected EOF"},
			{"POST", "/v1/slow", "timeout"},
			{"GET", "/v1/down/T-1", "connection refused"},
		} {
			before := len(e.logs.String())
			r := e.do(c.method, c.path+"?card=4242424242424242", "agent-token", `{"amount_minor":1999}`,
				"Idempotency-Key", "log"+c.path)
			if r.status != 502 && r.status != 504 {
				t.Fatalf("%s %s: %d %s", c.method, c.path, r.status, r.body)
			}
			found := false
			for _, line := range strings.Split(e.logs.String()[before:], "\n") {
				var l map[string]any
				if json.Unmarshal([]byte(line), &l) == nil && l["level"] == "ERROR" && l["msg"] == "upstream call failed" {
					found = l["upstream"] != "" && strings.Contains(l["error"].(string), c.errorText) &&
						(c.method == "GET" || l["operation_id"] == r.header.Get("Idempotency-Operation"))
				}
			}
			if !found {
				t.Errorf("%s %s: no error line saying %q in\n%s", c.method, c.path, c.errorText, e.logs.String()[before:])
			}
		}
		// Whole values only: a duration or an operation id may hold "4242".
		for _, secret := range []string{"upstream-secret", "agent-token", "4242424242424242", "card=", "amount_minor"} {
			if strings.Contains(e.logs.String(), secret) {
				t.Errorf("the log holds %q:\n%s", secret, e.logs.String())
			}
		}
	})
}
