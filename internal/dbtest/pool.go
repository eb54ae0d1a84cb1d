package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/store/postgres"
)

// The PostgreSQL schema pool. Migrating a new schema costs the server
// about a third of a CPU-second of DDL, and one make test opens several
// hundred of them: most of the server's CPU, on a 2-core machine. A
// schema a test is done with is emptied and handed to the next test
// instead, in this process or another one, in this run or the next. It
// is as good as new or it is not used:
//   - its name carries the digest of the migrations that made it
//     (postgres.MigrationsDigest), so another build never gets it;
//   - its comment holds its structure's signature, taken right after its
//     migration; a schema whose structure a test changed (a table of the
//     test's own, a column, an index, a trigger, a grant) no longer
//     matches, and is dropped instead;
//   - it is emptied (every row deleted, every sequence restarted) when it
//     is taken, so what a killed process left is gone too;
//   - a test holds it by an advisory lock on a session of its own until
//     it ends; the server releases the lock if the process dies.

// poolLockClass is the first key of the advisory lock that holds a pooled
// schema (the migrations' is 0x1de).
const poolLockClass = 0x1df

var (
	digestOnce sync.Once
	digest     string
	digestErr  error
)

var (
	holderMu sync.Mutex
	// holder is this process's session: it holds, by advisory locks, every
	// schema this process's tests hold. The locks are reentrant within a
	// session, so held says which of them a test of this process has.
	holder *pgx.Conn
	held   = map[string]bool{}
)

// PostgresMigratedDSN returns the DSN of a schema of the test's own,
// migrated and empty: a pooled one, emptied, or a new one, migrated. The
// test holds it until it ends. It skips the test when PostgreSQL is
// unreachable, or fails it under CI (see testenv).
func PostgresMigratedDSN(tb testing.TB) string {
	tb.Helper()
	testenv.RequirePostgres(tb)
	digestOnce.Do(func() {
		var d string
		d, digestErr = postgres.MigrationsDigest()
		digest = "tp_" + d[:12] + "_"
	})
	if digestErr != nil {
		tb.Fatal(digestErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema, err := take(ctx)
	if err == nil && schema == "" {
		schema, err = newPooled(ctx)
	}
	if err != nil {
		tb.Fatalf("postgres schema pool: %v", err)
	}
	tb.Cleanup(func() { giveBack(schema) })
	return schemaDSN(tb, schema)
}

// take takes a pooled schema for this process, or returns "" when none is
// free.
func take(ctx context.Context) (string, error) {
	holderMu.Lock()
	defer holderMu.Unlock()
	if holder == nil || holder.IsClosed() {
		conn, err := pgx.Connect(ctx, testenv.PostgresURL())
		if err != nil {
			return "", err
		}
		holder = conn
	}
	return takePooled(ctx, holder)
}

// giveBack releases the process's hold on schema, for the next test.
func giveBack(schema string) {
	holderMu.Lock()
	defer holderMu.Unlock()
	delete(held, schema)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = release(ctx, holder, schema, false) // failing, the hold ends with the process
}

// takePooled locks, checks and empties a pooled schema of this digest, or
// returns "" when none is free.
func takePooled(ctx context.Context, conn *pgx.Conn) (string, error) {
	rows, err := conn.Query(ctx, `SELECT nspname, coalesce(obj_description(oid, 'pg_namespace'), '')
		FROM pg_namespace WHERE starts_with(nspname, $1) ORDER BY random()`, digest)
	if err != nil {
		return "", err
	}
	all, err := pairs(rows)
	if err != nil {
		return "", err
	}
	for _, p := range all {
		name, sig := p[0], p[1]
		if held[name] {
			continue
		}
		var locked bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, poolLockClass, name).Scan(&locked); err != nil {
			return "", err
		}
		if !locked {
			continue
		}
		ok, err := reusable(ctx, conn, name, sig)
		if err != nil {
			return "", err
		}
		if ok {
			held[name] = true
			return name, nil
		}
		if err := release(ctx, conn, name, true); err != nil {
			return "", err
		}
	}
	return "", nil
}

// reusable tells whether schema still has the structure its migration
// gave it, and if so empties it.
func reusable(ctx context.Context, conn *pgx.Conn, schema, want string) (bool, error) {
	got, err := signature(ctx, conn, schema)
	if err != nil || want == "" || got != want {
		return false, err
	}
	return true, empty(ctx, conn, schema)
}

// release unlocks schema, dropping it first if drop.
func release(ctx context.Context, conn *pgx.Conn, schema string, drop bool) error {
	if drop {
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			return err
		}
	}
	_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, poolLockClass, schema)
	return err
}

// newPooled creates a schema of this digest, held by this process,
// migrates it with the store's own migrations, and records its
// signature. Only the lock is taken under holderMu: other tests of the
// process take pooled schemas meanwhile.
func newPooled(ctx context.Context) (string, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := digest + hex.EncodeToString(b[:])
	holderMu.Lock()
	_, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, poolLockClass, schema)
	held[schema] = err == nil
	holderMu.Unlock()
	if err != nil {
		return "", err
	}
	s, err := postgres.Open(ctx, dsnOf(schema), postgres.Options{})
	if err != nil {
		return "", err
	}
	err = s.Migrate(ctx)
	s.Close()
	if err != nil {
		return "", fmt.Errorf("migrate %s: %w", schema, err)
	}
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	sig, err := signature(ctx, conn, schema)
	if err != nil {
		return "", err
	}
	_, err = conn.Exec(ctx, `COMMENT ON SCHEMA `+pgx.Identifier{schema}.Sanitize()+` IS `+quote(sig))
	return schema, err
}

// empty deletes every row of schema but its migrations' record, and
// restarts its sequences, as a new schema has them. DELETE, not TRUNCATE:
// a few rows cost microseconds, a TRUNCATE a new file per table.
func empty(ctx context.Context, conn *pgx.Conn, schema string) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT c.oid::regclass::text, c.relkind::text FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'S') AND c.relname <> 'idem_schema_migrations'`, schema)
		if err != nil {
			return err
		}
		all, err := pairs(rows)
		if err != nil {
			return err
		}
		for _, r := range all {
			sql := `DELETE FROM ` + r[0]
			if r[1] == "S" {
				sql = `SELECT setval(` + quote(r[0]) + `, 1, false)`
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
		}
		return nil
	})
}

// signature is a digest of schema's structure: its relations and their
// grants, columns, defaults, indexes, constraints, triggers and
// functions, with the schema's own name taken out (as a qualifier
// too: pg_get_indexdef qualifies names outside the search_path).
func signature(ctx context.Context, conn *pgx.Conn, schema string) (string, error) {
	var sig string
	err := conn.QueryRow(ctx, signatureSQL, schema).Scan(&sig)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return sig, err
}

const signatureSQL = `WITH n AS (SELECT oid FROM pg_namespace WHERE nspname = $1)
SELECT md5(replace(replace(coalesce(string_agg(x, E'\n' ORDER BY x), ''), $1 || '.', ''), $1, '')) FROM (
  SELECT 'r ' || c.relname || ' ' || c.relkind::text || ' ' || c.relrowsecurity::text || ' ' || coalesce(c.relacl::text, '') AS x
    FROM pg_class c JOIN n ON c.relnamespace = n.oid
  UNION ALL
  SELECT 'a ' || c.relname || ' ' || a.attnum::text || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
      || ' ' || a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN n ON c.relnamespace = n.oid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'i ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN n ON c.relnamespace = n.oid
  UNION ALL
  SELECT 'k ' || co.conname || ' ' || pg_get_constraintdef(co.oid) FROM pg_constraint co JOIN n ON co.connamespace = n.oid
  UNION ALL
  SELECT 't ' || pg_get_triggerdef(tg.oid)
    FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN n ON c.relnamespace = n.oid WHERE NOT tg.tgisinternal
  UNION ALL
  SELECT 'f ' || p.proname || ' ' || md5(p.prosrc) || ' ' || coalesce(p.proconfig::text, '')
    FROM pg_proc p JOIN n ON p.pronamespace = n.oid
  UNION ALL
  SELECT 'p ' || pol.polname || ' ' || c.relname FROM pg_policy pol JOIN pg_class c ON c.oid = pol.polrelid JOIN n ON c.relnamespace = n.oid
) s`

// pairs reads rows of two text columns.
func pairs(rows pgx.Rows) ([][2]string, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var p [2]string
		err := r.Scan(&p[0], &p[1])
		return p, err
	})
}

// quote is s as an SQL string literal.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// dsnOf is the tests' server's DSN with search_path set to schema.
func dsnOf(schema string) string {
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		return testenv.PostgresURL()
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func schemaDSN(tb testing.TB, schema string) string {
	tb.Helper()
	if _, err := url.Parse(testenv.PostgresURL()); err != nil {
		tb.Fatalf("IDEMGATE_TEST_POSTGRES: %v", err)
	}
	return dsnOf(schema)
}
