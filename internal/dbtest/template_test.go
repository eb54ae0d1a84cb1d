package dbtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/store/sqlite"
	_ "modernc.org/sqlite"
)

// TestSQLiteFromTheTemplateIsAsGoodAsNew: a store dbtest seeds from its
// migrated template has the schema, the rows (but for when each migration
// ran) and the file mode of one created and migrated in place; a second
// handle on it changes nothing.
func TestSQLiteFromTheTemplateIsAsGoodAsNew(t *testing.T) {
	t.Parallel()
	fresh := filepath.Join(t.TempDir(), "fresh.db")
	s, err := sqlite.Open(context.Background(), fresh, sqlite.Options{})
	dbtest.Migrated(t, s, err)
	seeded := filepath.Join(t.TempDir(), "seeded.db")
	dbtest.SQLiteAt(t, seeded)
	dbtest.SQLiteAt(t, seeded) // a second handle: not seeded again
	if want, got := dump(t, fresh), dump(t, seeded); got != want {
		t.Fatalf("seeded:\n%s\nmigrated in place:\n%s", got, want)
	}
	if fi, err := os.Stat(seeded); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the seeded file: %v %v", fi, err)
	}
}

// dump is the schema of the SQLite file at path and every row of its
// tables, as text.
func dump(t *testing.T, path string) string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var b strings.Builder
	var tables []string
	rows, err := db.Query(`SELECT type, name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ, name, text string
		if err := rows.Scan(&typ, &name, &text); err != nil {
			t.Fatal(err)
		}
		b.WriteString(typ + " " + name + ": " + text + "\n")
		if typ == "table" {
			tables = append(tables, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		b.WriteString(table + ": " + rowsOf(t, db, table) + "\n")
	}
	return b.String()
}

// rowsOf is every row of table, as text, in the order of its columns.
func rowsOf(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	rows, err := db.Query(`SELECT * FROM "` + table + `" ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			if c == "applied_at" { // when a migration ran: the template's ran first
				vals[i] = nil
			}
		}
		out = append(out, fmt.Sprint(vals...))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " | ")
}
