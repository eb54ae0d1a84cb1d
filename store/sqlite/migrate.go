package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrate applies the embedded migrations that are not applied yet, in one
// IMMEDIATE transaction: SQLite's write lock makes a second process wait and
// then find them applied.
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
	_, err := step(s, ctx, durable, func(ctx context.Context, d driver) (struct{}, error) {
		return struct{}{}, migrateOn(ctx, d.q.(*writeConn).conn, all, s.now())
	})
	return err
}

// migrateOn applies what is pending on the writer's connection, inside
// its batch's transaction (a migration file holds several statements,
// which only an unprepared Exec runs).
func migrateOn(ctx context.Context, tx *sql.Conn, all []migrate.Migration, now time.Time) error {
	{
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS idem_schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
			return mapErr("migrate: version table", err)
		}
		applied := map[int]bool{}
		rows, err := tx.QueryContext(ctx, `SELECT version FROM idem_schema_migrations`)
		if err != nil {
			return mapErr("migrate: read versions", err)
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return mapErr("migrate: read versions", err)
			}
			applied[v] = true
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return mapErr("migrate: read versions", err)
		}
		for _, m := range migrate.Pending(all, applied) {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return mapErr(fmt.Sprintf("migrate %s", m.Name), err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO idem_schema_migrations (version, name, applied_at)
				VALUES (?, ?, ?)`, m.Version, m.Name, now.UnixMicro()); err != nil {
				return mapErr("migrate: record version", err)
			}
		}
		return nil
	}
}
