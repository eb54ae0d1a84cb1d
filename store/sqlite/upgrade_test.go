package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/idemgate/idemgate/internal/migrate"
	"github.com/idemgate/idemgate/ledger/storetest"
)

// previousRelease is the last migration of the release before key
// namespaces: its schema is what an upgrade starts from.
const previousRelease = "0010_decision_notes.sql"

// TestUpgradeToNamespaces starts from a store the previous release
// populated (its schema, its rows as its statements wrote them, its
// triggers writing their events: an HTTP route's, an action's, a
// consumer's, MCP calls' derived and _meta keys, a webhook's), migrates
// it (the table rebuilt), and checks that each operation is in its
// namespace, of its kind, and that a key final before the upgrade still
// replays after it (storetest.CheckUpgraded); then that the rebuilt table
// kept its indexes and triggers.
func TestUpgradeToNamespaces(t *testing.T) {
	t.Parallel()
	c := context.Background()
	s, err := Open(c, filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var before map[string]string
	storetest.Upgraded(t, s, storetest.Upgrade{
		Previous: func() error {
			all, err := migrate.LoadThrough(migrationFS, "migrations", previousRelease)
			if err == nil {
				err = s.migrate(c, all)
			}
			before = schemaObjects(t, s)
			return err
		},
		Write:   func(op storetest.Previous) error { return writePrevious(s, op) },
		Migrate: func() error { return s.Migrate(c) },
	})
	after := schemaObjects(t, s)
	for name, kind := range before {
		if after[name] != kind {
			t.Errorf("%s %s: gone after the upgrade", kind, name)
		}
	}
}

// schemaObjects lists the schema's indexes and triggers by name.
func schemaObjects(t *testing.T, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := eachRow(context.Background(), s.read, `SELECT name, type FROM sqlite_master WHERE type IN ('index', 'trigger')
		AND name NOT LIKE 'sqlite_autoindex_%'`, nil, func(r *sql.Rows) error {
		var name, kind string
		err := r.Scan(&name, &kind)
		out[name] = kind
		return err
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("schema: %v %v", out, err)
	}
	return out
}

// previousReserveSQL and previousCompleteSQL are the previous release's
// statements of a reservation with a lease and of its completion; its
// triggers write their events.
const (
	previousReserveSQL = `INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts, owner_token,
	fence, lease_until, business_key, concurrency_key, retention_us, created_at, updated_at, expires_at,
	last_actor, last_reason, principal, target, run_id, trace_id, probe)
VALUES (?1, ?2, ?3, ?4, ?5, 'executing', 1, 'token', 1, ` + nowUS + ` + 3600000000, NULL, NULL, 86400000000,
	` + nowUS + `, ` + nowUS + `, ` + nowUS + ` + 86400000000, 'gw', 'reserve with lease', ?6, 'POST /x', NULL, NULL, NULL)`
	previousCompleteSQL = `UPDATE idem_operations SET state = ?2, updated_at = ` + nowUS + `,
	probe_token = NULL, probe_until = NULL, probe_next = NULL, expires_at = ` + nowUS + ` + retention_us,
	last_actor = 'gw', last_reason = '', lease_until = NULL, response_status = ?3, response_headers = ?4,
	response_body = ?5, result_ref = NULL, last_error = NULL, response_sha256 = ?6
WHERE id = ?1 AND state = 'executing'`
)

// writePrevious writes op as the previous release did: its headers as
// JSON of net/http's Header, none as NULL.
func writePrevious(s *Store, op storetest.Previous) error {
	_, err := step(s, context.Background(), durable, func(ctx context.Context, d driver) (struct{}, error) {
		q := d.q.(*writeConn).conn
		if _, err := q.ExecContext(ctx, previousReserveSQL, op.ID, storetest.PreviousTenant, op.Key, op.Route,
			op.Fingerprint, op.Principal); err != nil || op.Response == nil {
			return struct{}{}, err
		}
		var headers any
		if len(op.Response.Header) > 0 {
			headers, _ = json.Marshal(http.Header(op.Response.Header))
		}
		body := op.Response.Body
		if body == nil {
			body = []byte{}
		}
		_, err := q.ExecContext(ctx, previousCompleteSQL, op.ID, string(op.State), op.Response.Status, headers, body,
			op.Response.SHA256())
		return struct{}{}, err
	})
	return err
}
