package dbtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestPooledSchemaIsAsGoodAsNew: a schema the pool hands out again has no
// row and its sequences start over; one whose structure a test changed
// is not handed out again, and is dropped.
func TestPooledSchemaIsAsGoodAsNew(t *testing.T) {
	dsn := PostgresMigratedDSN(t) // makes the digest and the holder ready
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	sig := comment(t, conn, schema)
	exec(t, conn, `INSERT INTO idem_audit_heads (tenant, size) VALUES ('acme', 7)`)
	exec(t, conn, `SELECT nextval(pg_get_serial_sequence('idem_audit_events', 'id'))`)
	if ok, err := reusable(ctx, conn, schema, sig); err != nil || !ok {
		t.Fatalf("an unchanged schema is not reusable: %v %v", ok, err)
	}
	var rows, next int64
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM idem_audit_heads),
		nextval(pg_get_serial_sequence('idem_audit_events', 'id'))`).Scan(&rows, &next); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || next != 1 {
		t.Fatalf("emptied: %d rows left, the sequence goes on at %d", rows, next)
	}
	exec(t, conn, `CREATE TABLE biz (id text PRIMARY KEY)`)
	if ok, err := reusable(ctx, conn, schema, sig); err != nil || ok {
		t.Fatalf("a schema with a table of a test's own is reusable: %v %v", ok, err)
	}
	exec(t, conn, `DROP TABLE biz`)
	exec(t, conn, `ALTER TABLE idem_operations ADD COLUMN extra int`)
	if ok, err := reusable(ctx, conn, schema, sig); err != nil || ok {
		t.Fatalf("a schema with a column of a test's own is reusable: %v %v", ok, err)
	}
}

func comment(t *testing.T, conn *pgx.Conn, schema string) string {
	t.Helper()
	var sig string
	err := conn.QueryRow(context.Background(), `SELECT coalesce(obj_description(oid, 'pg_namespace'), '')
		FROM pg_namespace WHERE nspname = $1`, schema).Scan(&sig)
	if err != nil || sig == "" {
		t.Fatalf("pooled schema %s has no signature: %v", schema, err)
	}
	return sig
}

func exec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
