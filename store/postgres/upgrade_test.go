package postgres

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgate/idemgate/internal/migrate"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/ledger/storetest"
)

// previousRelease is the last migration of the release before key
// namespaces: its schema is what an upgrade starts from.
const previousRelease = "0009_decision_notes.sql"

// TestUpgradeToNamespaces starts from a store the previous release
// populated (its schema, its rows as its statements wrote them: an HTTP
// route's, an action's, a consumer's, MCP calls' derived and _meta keys,
// a webhook's), migrates it, and checks that each operation is in its
// namespace, of its kind, and that a key final before the upgrade still
// replays after it (storetest.CheckUpgraded).
func TestUpgradeToNamespaces(t *testing.T) {
	c := context.Background()
	dsn, _ := testenv.PostgresSchema(t)
	s, err := Open(c, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	storetest.Upgraded(t, s, storetest.Upgrade{
		Previous: func() error {
			all, err := migrate.LoadThrough(migrationFS, "migrations", previousRelease)
			if err != nil {
				return err
			}
			return s.migrate(c, all)
		},
		Write:   func(op storetest.Previous) error { return writePrevious(s.pool, op) },
		Migrate: func() error { return s.Migrate(c) },
	})
}

// writePrevious writes op as the previous release did: the reservation
// with a lease and its event, then, for a final one, the completion with
// its stored response (headers as JSON of net/http's Header) and its
// event.
func writePrevious(pool *pgxpool.Pool, op storetest.Previous) error {
	c := context.Background()
	tenant := storetest.PreviousTenant
	if _, err := pool.Exec(c, `INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts,
		owner_token, fence, lease_until, retention_us, created_at, updated_at, expires_at, principal, target)
		VALUES ($1, $2, $3, $4, $5, 'executing', 1, 'token', 1, statement_timestamp() + interval '1 hour',
			86400000000, statement_timestamp(), statement_timestamp(), statement_timestamp() + interval '1 day', $6, $7)`,
		op.ID, tenant, op.Key, op.Route, op.Fingerprint, op.Principal, "POST /x"); err != nil {
		return err
	}
	event := `INSERT INTO idem_audit_events (tenant, at, kind, operation_id, principal, key, fingerprint, route,
		from_state, to_state, actor, reason) VALUES ($1, statement_timestamp(), $2, $3, $4, $5, $6, $7, $8, $9, 'gw', '')`
	if _, err := pool.Exec(c, event, tenant, "forwarded", op.ID, op.Principal, op.Key, op.Fingerprint, op.Route,
		nil, "executing"); err != nil || op.Response == nil {
		return err
	}
	var headers []byte
	if len(op.Response.Header) > 0 {
		headers, _ = json.Marshal(http.Header(op.Response.Header))
	}
	if _, err := pool.Exec(c, `UPDATE idem_operations SET state = $2, lease_until = NULL, response_status = $3,
		response_headers = $4, response_body = $5, response_sha256 = $6, updated_at = statement_timestamp()
		WHERE id = $1`, op.ID, string(op.State), op.Response.Status, headers, op.Response.Body,
		op.Response.SHA256()); err != nil {
		return err
	}
	_, err := pool.Exec(c, event, tenant, string(op.State), op.ID, op.Principal, op.Key, op.Fingerprint, op.Route,
		string(ledger.Executing), string(op.State))
	return err
}
