package gateway_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/idemgate/idemgate/httpidem"
)

// TestProblemsNamingAnOperationLinkIt: the attempt that lost the answer
// (502, 504, a cut body) and the one that sent nothing name the operation
// and link its status resource, exactly as every retry's 409 does.
func TestProblemsNamingAnOperationLinkIt(t *testing.T) {
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
			op, err := e.store.GetByKey(context.Background(), "acme", key)
			if err != nil {
				t.Fatalf("%s: %v", c.path, err)
			}
			var p httpidem.Problem
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
