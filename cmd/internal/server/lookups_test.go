package server_test

import (
	"strings"
	"testing"
)

// TestUnholdableIDsAreNotFound (issue 24, 7.6): an id, key or cursor
// holding NUL, or bytes that are not UTF-8, names nothing: 404 on both
// stores, and never a word of the database driver's.
func TestUnholdableIDsAreNotFound(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "k1")
		op := e.operations()[0]
		for _, bad := range []string{"%00", "%FF"} {
			for _, c := range []struct{ method, path, body string }{
				{"GET", "/_idem/v1/operations/op_x" + bad, ""},
				{"GET", "/_idem/v1/operations/" + op.ID + bad, ""},
				{"GET", "/_idem/v1/approvals/ap_x" + bad, ""},
				{"GET", "/_idem/v1/operations?key=k1" + bad, ""},
				{"GET", "/_idem/v1/operations?after=op_x" + bad, ""},
				{"GET", "/_idem/v1/approvals?after=ap_x" + bad, ""},
				{"POST", "/_idem/v1/operations/op_x" + bad + "/resolve", `{"state":"succeeded","note":"found"}`},
				{"POST", "/_idem/v1/effects/ef_x" + bad + "/resolve", `{"state":"succeeded","note":"found"}`},
			} {
				r := e.do(c.method, c.path, "alice-token", c.body)
				if r.status != 404 || code(r) != "not_found" || strings.Contains(r.body, "SQLSTATE") {
					t.Errorf("%s %s: %d %s", c.method, c.path, r.status, r.body)
				}
			}
		}
	})
}
