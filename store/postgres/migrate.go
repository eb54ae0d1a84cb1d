package postgres

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLockClass is the first key of the advisory lock that serializes
// migrations; the second is the schema's hash, so that separate schemas (one
// per test) migrate in parallel.
const migrationLockClass = 0x1de

// Migrate applies the embedded migrations that are not applied yet, in one
// transaction under an advisory lock: running it twice, or from several
// processes at once, applies each migration exactly once.
func (s *Store) Migrate(ctx context.Context) error {
	all, err := migrate.Load(migrationFS, "migrations")
	if err != nil {
		return err
	}
	return s.migrate(ctx, all)
}

// migrate applies what of all is pending: all of the embedded
// migrations, or the first of them, the schema of an earlier release
// (an upgrade's test).
func (s *Store) migrate(ctx context.Context, all []migrate.Migration) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, migrationLockClass, s.schema); err != nil {
			return mapErr("migrate: lock", err)
		}
		if s.schema != "" {
			if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
				return mapErr("migrate: create schema", err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return mapErr("migrate: version table", err)
		}
		applied, err := appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		for _, m := range migrate.Pending(all, applied) {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return mapErr(fmt.Sprintf("migrate %s", m.Name), err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO idem_schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return mapErr("migrate: record version", err)
			}
		}
		return nil
	})
}

func appliedVersions(ctx context.Context, tx pgx.Tx) (map[int]bool, error) {
	rows, err := tx.Query(ctx, `SELECT version FROM idem_schema_migrations`)
	if err != nil {
		return nil, mapErr("migrate: read versions", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, mapErr("migrate: read versions", err)
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

// MigrationsDigest names the schema this build migrates to: a SHA-256 of
// its migrations' versions, names and SQL. Two builds with one digest
// build one schema; the tests' schema pool (internal/dbtest) reuses a
// migrated schema only under the digest that made it.
func MigrationsDigest() (string, error) {
	all, err := migrate.Load(migrationFS, "migrations")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range all {
		fmt.Fprintf(h, "%d\x00%s\x00%d\x00%s", m.Version, m.Name, len(m.SQL), m.SQL)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
