package server_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/internal/testenv"
)

// budgetRoutes: a one-megabyte budget for every tenant, a rate that never
// stops a loop, an approval route, and a route whose path a caller makes
// as long as it likes.
const budgetRoutes = `  - {match: "POST /v1/notes/{id}", upstream: ops}
` + approvalRoute + `limits:
  default: {max_stored: 1MiB, rate: 100000/s, burst: 100000}
`

// TestOneTenantsBudgetSparesTheOthers: a tenant that writes long targets
// and asks approvals of large commands is stopped at its max_stored
// (429, nothing reserved): what its keys, targets, approval commands and
// their audit events hold is counted, not only its stored answers. The
// store's disk (a small filesystem, its free-space floor 64 MiB below its
// size) never fills, so another tenant's writes go on.
func TestOneTenantsBudgetSparesTheOthers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(testenv.Tmpfs(t, 96<<20), "ledger.db")
	e := newEnv(t, dbtest.SQLiteAt(t, path), "sqlite:"+path, budgetRoutes)
	segment := strings.Repeat("n", 7000)
	refused := ""
	for i := 0; i < 3000 && refused == ""; i++ {
		r := e.do("POST", fmt.Sprintf("/v1/notes/%d-%s", i, segment), "agent-token", `{}`,
			"Idempotency-Key", fmt.Sprint("long-", i))
		if r.status >= 429 {
			refused = fmt.Sprintf("write %d: %d %s", i, r.status, code(r))
			if r.status != 429 {
				t.Fatalf("acme was not stopped by its budget: %s", refused)
			}
			wantNoOperation(t, e, "acme", fmt.Sprint("long-", i))
		}
	}
	if refused == "" {
		t.Fatal("3000 writes of 7 KB targets never reached a 1 MiB budget")
	}
	command := fmt.Sprintf(`{"text":%q}`, strings.Repeat("c", 60000))
	if r := e.do("POST", "/v1/policy/prod", "agent-token", command, "Idempotency-Key", "big-approval"); r.status != 429 {
		t.Fatalf("an approval of a 60 KB command over the budget: %d %s", r.status, r.body)
	}
	for i := range 3 {
		if r := e.do("POST", "/v1/tickets", "globex-token", `{}`, "Idempotency-Key", fmt.Sprint("g", i)); r.status != 201 {
			t.Fatalf("globex's write %d after acme's: %d %s", i, r.status, r.body)
		}
	}
	if r := e.do("GET", "/readyz", "", ""); r.status != 200 {
		t.Fatalf("/readyz: %d %s", r.status, r.body)
	}
	t.Log(refused)
}

// TestApprovalsOfLargeCommandsFillTheBudget: the commands approvals hold
// count, so a tenant asking approvals of large commands is stopped at its
// budget long before the disk is.
func TestApprovalsOfLargeCommandsFillTheBudget(t *testing.T) {
	t.Parallel()
	path := filepath.Join(testenv.Tmpfs(t, 96<<20), "ledger.db")
	e := newEnv(t, dbtest.SQLiteAt(t, path), "sqlite:"+path, budgetRoutes)
	command := fmt.Sprintf(`{"text":%q}`, strings.Repeat("c", 60000))
	for i := 0; ; i++ {
		r := e.do("POST", "/v1/policy/prod", "agent-token", command, "Idempotency-Key", fmt.Sprint("apr-", i))
		if r.status == 202 && i < 600 {
			continue
		}
		if r.status != 429 || i > 40 {
			t.Fatalf("approval %d of a 60 KB command under a 1 MiB budget: %d %s", i, r.status, code(r))
		}
		break
	}
	if r := e.do("POST", "/v1/tickets", "globex-token", `{}`, "Idempotency-Key", "g"); r.status != 201 {
		t.Fatalf("globex's write: %d %s", r.status, r.body)
	}
}

// TestPendingApprovalsAreBounded: past max_pending_approvals a request
// that would open another approval is refused, 429 with nothing reserved;
// a retry of a pending one is answered as always, writes that need no
// approval go on, and another tenant's approvals are its own.
func TestPendingApprovalsAreBounded(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, approvalRoute+"limits:\n  tenants: {acme: {max_pending_approvals: 3}}\n")
	for i := range 3 {
		if r := e.do("POST", "/v1/policy/prod", "agent-token", `{}`, "Idempotency-Key", fmt.Sprint("p", i)); r.status != 202 {
			t.Fatalf("approval %d of 3: %d %s", i, r.status, r.body)
		}
	}
	r := e.do("POST", "/v1/policy/prod", "agent-token", `{}`, "Idempotency-Key", "p3")
	if r.status != 429 || code(r) != "rate_limited" || r.header.Get("Retry-After") == "" ||
		!strings.Contains(r.body, "3 approvals pending") {
		t.Fatalf("a fourth pending approval: %d %v %s", r.status, r.header, r.body)
	}
	wantNoOperation(t, e, "acme", "p3")
	if r := e.do("POST", "/v1/policy/prod", "agent-token", `{}`, "Idempotency-Key", "p0"); r.status != 202 {
		t.Fatalf("a retry of a pending one: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/tickets", "agent-token", `{}`, "Idempotency-Key", "t"); r.status != 201 {
		t.Fatalf("a write without an approval: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/policy/prod", "globex-token", `{}`, "Idempotency-Key", "g"); r.status != 202 {
		t.Fatalf("another tenant's approval: %d %s", r.status, r.body)
	}
}

// TestLongTargetsAndCommandsAreRefused: a target longer than 8 KiB, and
// on an approval route a command longer than 64 KiB, are 413 with nothing
// reserved: both are kept, and copied into every audit event or shown to
// the approver.
func TestLongTargetsAndCommandsAreRefused(t *testing.T) {
	t.Parallel()
	db := dbtest.SQLiteDB(t)
	e := newEnv(t, db.Open(t), db.DSN, budgetRoutes)
	r := e.do("POST", "/v1/notes/"+strings.Repeat("n", 9000), "agent-token", `{}`, "Idempotency-Key", "long")
	if r.status != 413 || code(r) != "payload_too_large" {
		t.Fatalf("a 9 KB target: %d %s", r.status, r.body)
	}
	wantNoOperation(t, e, "acme", "long")
	command := fmt.Sprintf(`{"text":%q}`, strings.Repeat("c", 70000))
	r = e.do("POST", "/v1/policy/prod", "agent-token", command, "Idempotency-Key", "big")
	if r.status != 413 || code(r) != "payload_too_large" {
		t.Fatalf("an approval of a 70 KB command: %d %s", r.status, r.body)
	}
	wantNoOperation(t, e, "acme", "big")
	if r := e.do("POST", "/v1/tickets", "agent-token", command, "Idempotency-Key", "big"); r.status != 201 {
		t.Fatalf("the same command where no approval shows it: %d %s", r.status, r.body)
	}
}
